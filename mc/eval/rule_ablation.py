"""Refocus rules measured on and off: the long-range sweep of one trained run, once per arm, on the same documents.

Owns :func:`run_rule_ablation` and its Markdown (``scripts/mc_ablate.py``; obsidian Focus Allocator, "Which rules
stay"). An *arm* is a name and a list of config overrides (``allocator.inference.edge_first=false``); arm
``all rules`` is the run's own config. Every arm reads the same documents (one ``eval.draw_seed``), so each
arm's difference from ``all rules`` is paired per document: a rule pays when switching it off loses
documents, with a confidence interval that excludes zero. The draw should be a *validation* draw, never the
one a report states: choosing rules on the reported documents would tune on the test set.

By default only ``focused`` is swept per arm; ``all rules`` also sweeps ``salience`` and ``oracle`` for reference.
The rules shape the salience rule's search too (it runs the same refocus), so ``salience=True`` sweeps it in every
arm as well and pairs it like ``focused``: what a rule does to the learned locator's lead over the non-learned one.
Each diff names its ``variant``. Each arm that swept both locators also reports that lead itself (focused minus
salience on the same documents and search, ``leads``).
"""
from __future__ import annotations

import copy
import time
from pathlib import Path

from mc.config import RunConfig
from mc.config_checks import validate
from mc.config_loading import apply_overrides
from mc.eval.stats import fmt_ci, paired_diff_ci, proportion_ci

BASELINE_ARM = "all rules"
# Each rule of the long preset's refocus, switched off alone (a rule another one needs goes with it).
DEFAULT_ARMS: dict[str, list[str]] = {
    "one branch": ["allocator.inference.branches=1", "allocator.inference.branch_siblings=false",
                   "allocator.inference.branch_unchanged=false", "allocator.inference.anchor_path=false",
                   "allocator.inference.branch_max_tokens=0", "allocator.inference.branch_lookahead=0",
                   "allocator.inference.scheduled_margin=0.0", "allocator.inference.prompt_margin=0.0"],
    "no sibling branches": ["allocator.inference.branch_siblings=false"],
    "no unchanged branch": ["allocator.inference.branch_unchanged=false", "allocator.inference.anchor_path=false",
                            "allocator.inference.scheduled_margin=0.0", "allocator.inference.prompt_margin=0.0"],
    "branch margin 0": ["allocator.inference.branch_margin=0.0"],
    "no edge first": ["allocator.inference.edge_first=false"],
    "no descend first": ["allocator.inference.descend_first=false", "allocator.inference.branch_siblings=false"],
}


def parse_arm(text: str) -> tuple[str, list[str]]:
    """``"name:key=value,key=value"`` -> (name, overrides); ValueError saying the expected form."""
    name, sep, rest = text.partition(":")
    overrides = [o.strip() for o in rest.split(",") if o.strip()]
    if not sep or not name.strip() or not overrides or any("=" not in o for o in overrides):
        raise ValueError(f"--arm {text!r} must look like 'name:key.path=value[,key.path=value...]'")
    return name.strip(), overrides


def arm_config(cfg: RunConfig, overrides: list[str]) -> RunConfig:
    """A copy of ``cfg`` with ``overrides`` applied and validated (a bad key or value names itself)."""
    return apply_overrides(copy.deepcopy(cfg), overrides)


def _arm_variants(name: str, salience: bool) -> list[str]:
    """The variants an arm sweeps: all rules adds the oracle; salience in every arm only when asked."""
    if name == BASELINE_ARM:
        return ["focused", "salience", "oracle"]
    return ["focused", "salience"] if salience else ["focused"]


def run_rule_ablation(cfg: RunConfig, run_dir: str | Path, arms: dict[str, list[str]], *,
                      progress: bool = False, salience: bool = False) -> dict:
    """The sweep of ``run_dir``'s nets once per arm (plus :data:`BASELINE_ARM`); ``cfg.eval.draw_seed`` must be
    set (the documents every arm reads). ``salience``: every arm also sweeps the salience rule, paired like
    focused. Returns ``{draw_seed, arms, tasks, lengths, salience, cells, diffs, leads, seconds}``; ``leads``: per arm
    that swept both (all rules always) and task, focused minus salience paired per document."""
    from mc.eval.evaluate import load_trained_controller  # noqa: PLC0415 - heavy imports only when run
    from mc.eval.long_range import run_long_range  # noqa: PLC0415

    if cfg.eval.draw_seed is None:
        raise ValueError("run_rule_ablation needs eval.draw_seed set: every arm must read the same documents")
    if not cfg.eval.long_range.multiples:
        raise ValueError("run_rule_ablation needs eval.long_range.multiples (the sweep's lengths); it is empty")
    if BASELINE_ARM in arms:
        raise ValueError(f"arm name {BASELINE_ARM!r} is the run's own config; name the arm differently")
    t0 = time.time()
    configs = {BASELINE_ARM: validate(copy.deepcopy(cfg))}
    configs.update({name: arm_config(cfg, ov) for name, ov in arms.items()})  # all validated before any sweep
    rows: dict[str, list[dict]] = {}
    sweep = None
    for name, acfg in configs.items():
        acfg.eval.long_range.variants = _arm_variants(name, salience)
        ctrl = load_trained_controller(acfg, run_dir)
        if progress:
            print(f"[ablate] {name}: {' '.join(arms.get(name, [])) or 'the run config'}", flush=True)
        sweep = run_long_range(ctrl, acfg, progress=progress)
        rows[name] = sweep["rows"]
    key = lambda r: (r["task"], r["length"], r["depth"], r["doc"])  # noqa: E731 - one document
    base = {key(r): r for r in rows[BASELINE_ARM]}
    cells, diffs, leads = [], [], []
    for name in configs:
        for task in sweep["tasks"]:
            for length in sweep["lengths"]:
                sel = [r for r in rows[name] if (r["task"], r["length"]) == (task, length)]
                for v in _arm_variants(name, salience):
                    ci = proportion_ci([r["exact"][v] for r in sel])
                    cells.append({"arm": name, "task": task, "length": length, "variant": v, "accuracy": ci["mean"],
                                  "lo": ci["lo"], "hi": ci["hi"], "n": ci["n"]})
            sel = [r for r in rows[name] if r["task"] == task]
            if name != BASELINE_ARM:
                for v in _arm_variants(name, salience):
                    d = paired_diff_ci([float(r["exact"][v]) for r in sel], [float(base[key(r)]["exact"][v]) for r in sel])
                    diffs.append({"arm": name, "task": task, "variant": v, "overrides": arms[name], **d})
            if "salience" in _arm_variants(name, salience):  # the learned locator's lead under this arm's search
                d = paired_diff_ci([float(r["exact"]["focused"]) for r in sel], [float(r["exact"]["salience"]) for r in sel])
                leads.append({"arm": name, "task": task, **d})
    return {"draw_seed": cfg.eval.draw_seed, "arms": {BASELINE_ARM: [], **arms}, "tasks": sweep["tasks"],
            "lengths": sweep["lengths"], "base_window": sweep["base_window"], "salience": salience,
            "cells": cells, "diffs": diffs, "leads": leads,
            "seconds": round(time.time() - t0, 1)}


def ablation_markdown(res: dict) -> str:
    """Per task: accuracy per arm, variant and length, and the arm's paired difference from all rules."""
    w, salience = res["base_window"], res["salience"]
    out = [f"Documents: eval.draw_seed={res['draw_seed']} (every arm reads the same ones); {res['seconds']} s.", ""]
    for task in res["tasks"]:
        out += [f"**{task}**", "", "| arm | " + " | ".join(f"{n // w}x" for n in res["lengths"])
                + " | minus all rules [95% CI] |", "|---" * (len(res["lengths"]) + 2) + "|"]
        for arm in res["arms"]:
            for v in _arm_variants(arm, salience):
                cs = [next(c for c in res["cells"] if (c["arm"], c["task"], c["length"], c["variant"]) ==
                           (arm, task, n, v)) for n in res["lengths"]]
                d = next((x for x in res["diffs"] if (x["arm"], x["task"], x["variant"]) ==
                          (arm, task, v)), None)
                label = arm if v == "focused" else f"{arm} ({v})"
                out.append(f"| {label} | " + " | ".join(f"{c['accuracy']:.0%} ({c['n']})" for c in cs)
                           + f" | {fmt_ci(d) if d else '-'} |")
        out.append("")
        leads = [x for x in res["leads"] if x["task"] == task]  # all rules sweeps both locators: never empty
        out += ["LensNet minus salience, same documents and search [95% CI]: "
                + "; ".join(f"{x['arm']} {fmt_ci(x)}" for x in leads), ""]
    return "\n".join(out)
