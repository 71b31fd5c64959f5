"""The task suite alone on a trained run (``scripts/mc_eval.py --tasks``).

Owns :func:`evaluate_tasks`: load the run's nets, run :func:`mc.eval.task_suite.run_task_suite`, write
``eval/tasks.json`` and ``eval/tasks.md``. It lives in the app layer because it needs both the
evaluation's loader and the suite, and the evaluation itself calls the suite (a cycle inside mc.eval).
"""
from __future__ import annotations

import time
from pathlib import Path

import torch

from mc.build import resolve_device
from mc.config import RunConfig
from mc.eval.evaluate import _eval_config, load_trained_controller
from mc.eval.task_suite import run_task_suite, to_markdown
from mc.io import write_json, write_text


def evaluate_tasks(cfg: RunConfig, run_dir, *, progress: bool = True) -> dict:
    """Run the suite of ``cfg.eval.tasks`` on the nets of ``run_dir``; write and return the result."""
    run_dir = Path(run_dir)
    ecfg = _eval_config(cfg)
    ctrl = load_trained_controller(ecfg, run_dir, device=resolve_device(cfg.train.device))
    for m in (ctrl.base, ctrl.gistnet, ctrl.lensnet):
        m.eval()
    try:
        res = {"preset": cfg.preset, "created": time.strftime("%Y-%m-%d %H:%M:%S"), "torch": torch.__version__,
               **run_task_suite(ctrl, ecfg, progress=progress)}
    finally:
        ctrl.telemetry.close()
    write_json(run_dir / "eval" / "tasks.json", res, indent=1)
    write_text(run_dir / "eval" / "tasks.md", f"# Task suite of {run_dir.name}\n\n" + to_markdown(res))
    return res
