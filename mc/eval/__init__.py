"""Evaluation of a trained run: four ways of reading long held-out documents at one budget.

``run_evaluation(cfg, run_dir)`` (in :mod:`mc.eval.evaluate`) writes ``run_dir/eval/eval.json``;
:mod:`mc.eval.baselines` holds the plain-LOD0 base-model variants and :mod:`mc.eval.stats` the
confidence intervals. See the obsidian note "Evaluation".
"""
from mc.eval.evaluate import VARIANTS, run_evaluation
from mc.eval.stats import mean_ci, paired_diff_ci, proportion_ci

__all__ = ["VARIANTS", "run_evaluation", "mean_ci", "paired_diff_ci", "proportion_ci"]
