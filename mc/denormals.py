"""Flush-to-zero for subnormal floats on CPU, set once for the process when ``mc`` is imported.

Owns the process-wide setting :data:`FLUSH_DENORMAL` (what ``import mc`` did) and its switch, :func:`setting_from_env`.

Why: floats below ``torch.finfo(torch.float32).tiny`` (~1.2e-38) are subnormal, and on Intel CPUs an arithmetic
op that reads or writes one takes a slow path in microcode. Stage 2 of ``long_corpus`` on a 2-core Intel Xeon VM
slowed from 0.56 s a step to 1.5 s by step 1000 as the token index's gradients fell into that range: its
convolution backward ran 36x slower (929 ms against 26 ms a step with flush-to-zero; obsidian Training,
"Subnormal floats"). Flushing them to zero (FTZ for results, DAZ for inputs) changes only values below that
threshold; the AMD VM's whole runs did not show the slowdown.

When: the mode is a per-thread CPU register, and a thread copies it from the thread that creates it. Torch's
intra-op thread pool starts at the first parallel op, so the mode must be set before that, or only the calling
thread has it (measured: a step at 1.12 s instead of 0.52 s with the pool's second thread left out). Setting it at
``import mc`` covers every entry point (the workflow, torchrun ranks, sweep workers, the scripts, the tests, a user's
own process that imports ``mc`` before running torch ops). ``MC_FLUSH_DENORMAL=0`` leaves the process's float mode
as it was. The mode is the process's CPU state, not torch's alone: Python floats and numpy flush too (doubles
below ~2.2e-308), and Hypothesis refuses to draw subnormal floats under it (the tests pass allow_subnormal=False).
CUDA kernels are untouched.
"""
from __future__ import annotations

import os

import torch

ENV = "MC_FLUSH_DENORMAL"


def setting_from_env(environ=os.environ) -> bool:
    """Whether ``import mc`` flushes subnormals: ``MC_FLUSH_DENORMAL`` unset, empty or ``1`` = yes, ``0`` = no."""
    value = environ.get(ENV, "").strip()
    if value not in ("", "0", "1"):
        raise ValueError(f"{ENV}={value!r} is not valid: set it to 1 (flush subnormal floats to zero on CPU, the "
                         "default) or 0 (leave the process's float mode as it is), or unset it")
    return value != "0"


# Whether subnormal floats are flushed to zero in this process: set on this thread, inherited by threads made later
# (False where MC_FLUSH_DENORMAL=0, or where the CPU lacks the mode: torch.set_flush_denormal needs x86 with SSE3).
FLUSH_DENORMAL = bool(torch.set_flush_denormal(True)) if setting_from_env() else False
