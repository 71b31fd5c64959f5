"""The harness's ``--inject hook`` failure: a user-style forward hook that closes over mutable state.

A hook on LensNet reads ``flag.capture`` (a plain Python attribute) inside the compiled forward, so
Dynamo guards on its value; flipping the flag after warm-up recompiles (``freeze=warn``) or is
refused (``freeze=fail``). It is the pattern behind real slowdowns (a debugging hook left on a
compiled module), and the guard that fails is the flag's, not the grad mode that the first cache
entry happens to differ in: the verdict must name it (see obsidian Runbook, Telemetry).
"""
from __future__ import annotations

from typing import Any

from torch import nn


class CaptureFlag:
    """The mutable state the hook closes over; ``last`` holds the latest output while ``capture`` is on."""

    def __init__(self) -> None:
        self.capture = False
        self.last: Any = None
        self.handle: Any = None


def install_capture_hook(module: nn.Module) -> CaptureFlag:
    """Register the hook on ``module`` (before compiling, so warm-up traces it); flip ``.capture`` later."""
    flag = CaptureFlag()

    def capture_hook(mod: nn.Module, inputs: Any, output: Any) -> None:
        if flag.capture:  # a guard on flag.capture: the culprit the verdict must name
            flag.last = output.detach()

    flag.handle = module.register_forward_hook(capture_hook)
    return flag
