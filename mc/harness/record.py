"""What one compile-harness run observed: a plain record, the interface between run and verdict.

:mod:`mc.harness.run` fills a :class:`HarnessRecord` while it drives the controller;
:func:`mc.harness.verdict.build_verdict` turns it into the verdict dict. The record holds plain
data only (numbers, strings, lists, dicts: no controller, no telemetry object, no tensors), so a
verdict can be built, and tested, from a record written by hand. The run's fixed sizes that the
verdict's coverage check compares against live here too. See obsidian "Runbook" (compile harness).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

N_REFOCUS = 6  # appends (each triggering a refocus) per inference round
N_ROUNDS = 2  # identical train + inference rounds; device memory must stay flat between them
MIN_MICRO_STEPS = 2  # micro-steps per training round at least (gradient accumulation really happens)
INJECTIONS = ("recompile", "alias", "hook")  # test hooks that prove the harness can fail (see mc.harness.run)
INJECT_ENV = "MC_HARNESS_INJECT"  # the CLI also takes the hook from this environment variable


def _counts() -> dict[str, int]:
    return {"train_micro_steps": 0, "optimizer_steps": 0, "refocuses": 0}


@dataclass
class HarnessRecord:
    """Everything the verdict needs from one run (filled in phase order; defaults = not reached)."""

    config_hash: str  # mc.config_loading.compile_hash of the resolved config
    device_type: str  # "cpu" / "cuda": which checks apply (CUDA graphs, memory)
    device_label: str  # mc.harness.probes.device_label: what the workflow matches a reused verdict on
    compile_modes: dict[str, str]  # {"lensnet.train": mode, ...} as resolved
    strict: bool = False  # strict CUDA-graph mode was requested
    inject: str | None = None  # the test hook that ran, if any (one of INJECTIONS)
    compile_budget_s: float = 0.0  # compile_time fails above this (0: report only)
    warmed: bool = False  # build and warm-up finished: the steady state was reached
    wall_s: float = 0.0  # the whole run
    errors: list[dict] = field(default_factory=list)  # {"phase", "type", "error"} per phase that raised
    recompile_errors: list[str] = field(default_factory=list)  # "[phase] guard text" of fail_on_recompile errors
    held: list[dict] = field(default_factory=list)  # {"what", "changed", "aliased", "max_abs_diff"} per kept output
    parity: dict[str, tuple[float, str]] = field(default_factory=dict)  # what -> (max rel. error vs eager, where)
    tensors_checked: int = 0  # tracked outputs (losses, scores, grads, gists, logits) tested for NaN/Inf
    nonfinite: list[str] = field(default_factory=list)  # names of the tracked tensors holding NaN/Inf
    memory: dict[str, Any] = field(default_factory=dict)  # "baseline" / "end": probes.cuda_memory (None off CUDA)
    counts: dict[str, int] = field(default_factory=_counts)  # micro-steps, optimizer steps, refocuses done
    net_calls: dict[str, int] = field(default_factory=dict)  # "net/context" -> calls after warm-up
    timings: dict[str, float] = field(default_factory=dict)  # phase -> seconds (and "warmup_wall_s")
    notes: list[str] = field(default_factory=list)  # caveats of this run (e.g. strict mode incomplete)
    monitor: dict | None = None  # CompileMonitor.snapshot() after the run (None: the monitor never started)
    cudagraph_status: str = "unknown (monitor not started)"  # Telemetry.cudagraph_status()

    @staticmethod
    def wanted_counts() -> dict[str, int]:
        """The least work a complete run does (the coverage check): rounds x (micro-steps, steps, refocuses)."""
        return {"train_micro_steps": N_ROUNDS * MIN_MICRO_STEPS, "optimizer_steps": N_ROUNDS,
                "refocuses": N_ROUNDS * (N_REFOCUS + 1)}
