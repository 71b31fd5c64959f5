"""Reading trained nets at another working-context budget: the controller a sweep reads with.

Owns :func:`at_budget`. The task suite (``eval.tasks.budget``) and the long-range sweep
(``eval.long_range.budget``) may read at a budget other than the one stage 2 trained at (``mc.max_entries``):
neither net depends on it (GistNet gists K entries at a time; LensNet's features are LOD and shares of the
history, not entry counts), so nets trained at one W can be read at another (obsidian Evaluation,
"Reading at another budget").
"""
from __future__ import annotations

import copy

from mc.config import RunConfig


def at_budget(ctrl, cfg: RunConfig, budget: int):
    """``(controller, config)`` to read with: ``ctrl`` and ``cfg`` themselves when ``budget`` is 0 or
    ``mc.max_entries``, else a controller over the same nets whose working contexts hold ``budget`` entries (the
    bucket ladder ends at it). That controller runs eagerly: a compiled net at a new bucket would be a new graph, a
    recompile after the run's warm-up."""
    if not budget or budget == cfg.mc.max_entries:
        return ctrl, cfg
    from mc.controller import MCController  # noqa: PLC0415 - mc.eval stays importable without the controller

    rcfg = copy.deepcopy(cfg)
    rcfg.mc.max_entries = budget
    rcfg.mc.bucket_ladder = [b for b in cfg.mc.bucket_ladder if b < budget] + [budget]
    for net in (rcfg.compile.lensnet, rcfg.compile.gistnet):
        net.train = net.inference = "off"
    rcfg.compile.decode = "off"
    return MCController(rcfg, ctrl.base, ctrl.gistnet, ctrl.lensnet, device=ctrl.device, telemetry=ctrl.telemetry), rcfg
