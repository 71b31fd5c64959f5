"""MegaContext: a compiled-controller runtime for learned LLM context focus.

A frozen base LM reads a fixed-size working context of tokens and gists; GistNet makes the gists,
LensNet scores entries, the focus allocator edits the context, and the MCController runs both nets
through one compiled boundary. See README.md and the obsidian/ vault.
"""
__version__ = "0.1.0"

# Before any torch op starts the intra-op thread pool: its threads copy the float mode (mc/denormals.py says why).
from mc import denormals as _denormals  # noqa: E402,F401
