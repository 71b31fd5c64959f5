"""The compiled boundary (``boundary``) and its observability (``monitor``, ``telemetry``).

See obsidian/Compiled boundary.md and obsidian/Telemetry.md.
"""
from mc.compile.boundary import (
    CompiledNet,
    StepMarker,
    apply_recompile_limit,
    clone_outputs,
    freeze,
    in_backward,
    load_mega_cache,
    mega_cache_unavailable,
    recompile_limit_for,
    reentrance_reason,
    save_mega_cache,
    strict_cudagraphs,
    unfreeze,
)
from mc.compile.monitor import CompileMonitor
from mc.compile.telemetry import CONTEXTS, NETS, CallCounters, Telemetry

__all__ = [
    "CONTEXTS", "NETS", "CallCounters", "CompileMonitor", "CompiledNet", "StepMarker", "Telemetry",
    "apply_recompile_limit", "clone_outputs", "freeze", "in_backward", "load_mega_cache",
    "mega_cache_unavailable", "recompile_limit_for", "reentrance_reason", "save_mega_cache",
    "strict_cudagraphs", "unfreeze",
]
