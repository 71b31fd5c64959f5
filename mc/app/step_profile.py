"""Stage-2 step cost against its floor: the full micro-step vs the base model's forward + backward alone.

Owns the measurement behind ``scripts/mc_step_profile.py`` (obsidian Training, "What a stage-2 step
costs"). For a preset's geometry it builds the controller and a real stage-2 batch (the corpus +
recall mix of the workflow's sampler), then times, in one process and round-robin:

* ``step``: one whole micro-step as training runs it: the host plan (``prepare_step``: variants,
  gather tables), ``run_step`` (GistNet over the history, gather, the base over every variant,
  LensNet, the losses), the backward, gradient clipping, the optimizer step and ``zero_grad``;
* ``base``: the base model's forward + backward over the same materialised working contexts (the
  same ``[R, W, D]`` embeddings as a leaf that needs a gradient, as GistNet's gists do in training)
  with the same shared-tail loss: the part of a step no change around the base can remove;
* ``gistnet`` and ``lensnet``: each trained net's own forward + backward over the step's inputs (GistNet over
  every level of the histories' trees, LensNet over every variant's working context, its input gradient only
  with ``mc.lens_trains_gist``), with a plain sum as the loss: what those nets cost however the step around
  them is written.

``step / base`` is the ratio the issue tracks; ``floor`` = base + gistnet + lensnet is the least a step that
trains both nets through the frozen base can cost, and ``step / floor`` says how much the rest (host planning,
gathers, losses, clipping, the optimizer) adds. A profile of one more step splits it by phase: the
``mc.step.*`` labels of :meth:`MCController.run_step` (GistNet, gather, base, LensNet, losses, and the
distillation teacher's forward, which runs inside the losses) from ``torch.profiler``, and host planning,
backward and optimizer by wall clock around their calls.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import date
from pathlib import Path
from typing import Sequence

import torch

from mc.io import write_results, write_text

PHASES = ("plan", "gistnet", "gather", "base", "lensnet", "teacher", "losses", "backward", "optimizer")


class StepBench:
    """A controller, an optimizer and one fixed stage-2 batch for a config (see module docstring)."""

    def __init__(self, cfg, *, max_files: int | None = 200, seed: int = 0) -> None:
        from mc.build import build_controller  # noqa: PLC0415
        from mc.train.common import make_sampler, setup_device  # noqa: PLC0415
        from mc.train.optim import make_optimizer  # noqa: PLC0415

        self.cfg = cfg
        self.device = setup_device(cfg)
        self.ctrl = build_controller(cfg, device=self.device)
        self.ctrl.gistnet.train()
        self.ctrl.lensnet.train()
        self.opt = make_optimizer(self.ctrl.aux_parameters(), cfg.train.stage2)
        sampler = make_sampler(cfg, "train", cfg.mc.history_tokens, max_files=max_files)
        self.batch = sampler.sample(cfg.train.stage2.batch_size, cfg.mc.history_tokens, torch.Generator().manual_seed(seed))
        self.seed = seed
        self.groups = [list(self.ctrl.gistnet.parameters()), list(self.ctrl.lensnet.parameters())]

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def plan(self):
        b = self.batch
        return self.ctrl.prepare_step(b.tokens, torch.Generator().manual_seed(self.seed), b.queried_spans(),
                                      decoy_spans=b.other_record_spans(), query_ends=b.query_ends())

    def step(self, phases: dict[str, float] | None = None) -> float:
        """One whole micro-step plus the optimizer; seconds. ``phases`` gets plan/backward/optimizer wall times."""
        self._sync()
        t0 = time.perf_counter()
        plan = self.plan()
        t1 = time.perf_counter()
        out = self.ctrl.run_step(plan)
        self._sync()
        t2 = time.perf_counter()
        out.total.backward()
        self.ctrl.end_micro_step()
        self._sync()
        t3 = time.perf_counter()
        for group in self.groups:
            torch.nn.utils.clip_grad_norm_(group, 1.0)
        self.opt.step()
        self.ctrl.zero_grad(self.opt)
        self._sync()
        t4 = time.perf_counter()
        if phases is not None:
            phases.update(plan=t1 - t0, forward=t2 - t1, backward=t3 - t2, optimizer=t4 - t3)
        return t4 - t0

    def _materialise(self):
        """One step's plan and what it reads, built once (no grad): the histories' token embeddings ``[B, T, D]``,
        the variants' entries ``[R, W, D]`` and their mask."""
        from mc.gather import gather_planned  # noqa: PLC0415
        from mc.tree import gist_levels  # noqa: PLC0415

        p = self.plan().to(self.device)
        mc = self.cfg.mc
        with torch.no_grad():
            tokens = self.ctrl.base.embed(p.ids)
            levels = gist_levels(tokens, mc.block_size, mc.max_lod, lambda x: self.ctrl.gist_blocks(x))
            embeds, mask = gather_planned(levels, p.index, p.lengths)
        return p, tokens, embeds, mask

    def base_inputs(self):
        """The working contexts one step reads, materialised once (no grad): embeds, positions, lods, mask, targets."""
        p, _, embeds, mask = self._materialise()
        return embeds, p.positions, p.lods, mask, p.token_ids, p.lengths

    def base(self, inputs) -> float:
        """The base model's forward + backward over ``inputs`` (the step's working contexts); seconds."""
        from mc.nets.losses import base_tail_loss  # noqa: PLC0415

        embeds, positions, lods, mask, token_ids, lengths = inputs
        leaf = embeds.detach().requires_grad_(True)  # gradients reach the entries, as they reach GistNet's gists
        self._sync()
        t0 = time.perf_counter()
        base_tail_loss(self.ctrl.base_logits, leaf, positions, lods, mask, token_ids, lengths,
                       self.cfg.mc.recent_tokens)[0].mean().backward()  # the step's own base work
        self._sync()
        return time.perf_counter() - t0

    def net_inputs(self):
        """What GistNet and LensNet read in one step (:meth:`_materialise`): the histories' token embeddings and
        the variants' working contexts (embeds, mask, positions, lods, num_tokens)."""
        p, tokens, embeds, mask = self._materialise()
        num_tokens = torch.full((embeds.shape[0],), float(p.ids.shape[1]), device=self.device)
        return tokens, (embeds, mask, p.positions, p.lods, num_tokens)

    def gistnet(self, inputs) -> float:
        """GistNet's forward + backward over every level of the step's trees; seconds."""
        from mc.tree import gist_levels  # noqa: PLC0415

        mc = self.cfg.mc
        self._sync()
        t0 = time.perf_counter()
        levels = gist_levels(inputs[0], mc.block_size, mc.max_lod, lambda x: self.ctrl.gist_blocks(x, train=True))
        sum(level.sum() for level in levels[1:]).backward()
        self._sync()
        dt = time.perf_counter() - t0
        self.ctrl.zero_grad(self.opt)
        return dt

    def lensnet(self, inputs) -> float:
        """LensNet's forward + backward over every variant's working context; seconds."""
        embeds, mask, positions, lods, num_tokens = inputs[1]
        leaf = embeds.detach().requires_grad_(self.cfg.mc.lens_trains_gist)
        self._sync()
        t0 = time.perf_counter()
        self.ctrl._run_lensnet_batched(leaf, mask, positions, lods, num_tokens).sum().backward()
        self._sync()
        dt = time.perf_counter() - t0
        self.ctrl.zero_grad(self.opt)
        return dt

    def profile(self) -> dict[str, float]:
        """Seconds per phase of one micro-step (PHASES)."""
        from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
        walls: dict[str, float] = {}
        with profile(activities=acts) as prof:
            self.step(walls)
        labelled = {}
        self.last_averages = prof.key_averages()  # kept for measure()'s op table
        for ev in self.last_averages:
            if ev.key.startswith("mc.step."):
                total_us = ev.device_time_total if self.device.type == "cuda" else ev.cpu_time_total
                labelled[ev.key[len("mc.step."):]] = total_us / 1e6
        teacher = labelled.pop("teacher", 0.0)  # the distillation teacher runs inside mc.step.losses: its own phase here
        labelled["losses"] = max(labelled.get("losses", 0.0) - teacher, 0.0)
        labelled["teacher"] = teacher
        out = {"plan": walls["plan"], **{k: labelled.get(k, 0.0) for k in ("gistnet", "gather", "base", "lensnet", "teacher", "losses")},
               "backward": walls["backward"], "optimizer": walls["optimizer"]}
        out["forward_other"] = max(walls["forward"] - sum(labelled.values()), 0.0)
        return out


def measure(cfg, *, reps: int, warmup: int = 2, table: Path | None = None) -> dict:
    sb = StepBench(cfg)
    inputs, nets = sb.base_inputs(), sb.net_inputs()
    for _ in range(warmup):  # first calls (allocator growth, lazy init) are nobody's cost
        sb.step()
        sb.base(inputs)
        sb.gistnet(nets)
        sb.lensnet(nets)
    step_s, base_s, gist_s, lens_s = [], [], [], []
    for _ in range(reps):  # round-robin: all see the same machine state
        step_s.append(sb.step())
        base_s.append(sb.base(inputs))
        gist_s.append(sb.gistnet(nets))
        lens_s.append(sb.lensnet(nets))
    phases = [sb.profile() for _ in range(3)]
    phase_med = {k: statistics.median(p[k] for p in phases) for k in phases[0]}
    if table is not None:  # the last profiled step's ops: where a phase's time goes when the phases alone do not say
        sort = "self_device_time_total" if sb.device.type == "cuda" else "self_cpu_time_total"
        write_text(table, sb.last_averages.table(sort_by=sort, row_limit=40) + "\n")
    rows, w = inputs[0].shape[0], inputs[0].shape[1]
    med = {k: statistics.median(v) for k, v in (("step", step_s), ("base", base_s), ("gist", gist_s), ("lens", lens_s))}
    floor = med["base"] + med["gist"] + med["lens"]
    return {"step_ms": 1e3 * med["step"], "base_fwd_bwd_ms": 1e3 * med["base"], "ratio": med["step"] / med["base"],
            "gistnet_fwd_bwd_ms": 1e3 * med["gist"], "lensnet_fwd_bwd_ms": 1e3 * med["lens"], "floor_ms": 1e3 * floor,
            "floor_ratio": floor / med["base"], "step_over_floor": med["step"] / floor,
            "phases_ms": {k: 1e3 * v for k, v in phase_med.items()}, "rows": rows, "bucket": w,
            "history_tokens": cfg.mc.history_tokens, "batch": cfg.train.stage2.batch_size,
            "variants": cfg.mc.n_random_variants + 1, "reps": reps}


def to_markdown(res: dict) -> str:
    s = res["setup"]
    lines = [f"# Stage-2 micro-step vs the base's forward + backward ({s['date']})", "",
             f"device {s['device']}, {s['threads']} threads, torch {s['torch']}; medians of {s['reps']} round-robin "
             "pairs; phases: median of 3 profiled steps.", "",
             "| preset | rows x entries | history | step (ms) | base fwd+bwd (ms) | step / base | "
             + " | ".join(PHASES) + " |", "|---" * (6 + len(PHASES)) + "|"]
    for name, r in res["presets"].items():
        ph = r["phases_ms"]
        lines.append(f"| {name} | {r['rows']} x {r['bucket']} | {r['history_tokens']} | {r['step_ms']:.1f} | "
                     f"{r['base_fwd_bwd_ms']:.1f} | **{r['ratio']:.2f}** | "
                     + " | ".join(f"{ph.get(k, 0.0):.1f}" for k in PHASES) + " |")
    lines += ["", "The floor: each net's own forward + backward over the same step's inputs, timed in the same round-robin "
              "(ms; floor = base + GistNet + LensNet).", "",
              "| preset | base | GistNet | LensNet | floor | floor / base | step / floor |", "|---" * 7 + "|"]
    for name, r in res["presets"].items():
        lines.append(f"| {name} | {r['base_fwd_bwd_ms']:.1f} | {r['gistnet_fwd_bwd_ms']:.1f} | {r['lensnet_fwd_bwd_ms']:.1f} | "
                     f"{r['floor_ms']:.1f} | {r['floor_ratio']:.2f} | **{r['step_over_floor']:.2f}** |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    from mc.app.bench import device_name  # noqa: PLC0415
    from mc.config_loading import load_config  # noqa: PLC0415
    from mc.train.common import setup_device  # noqa: PLC0415

    p = argparse.ArgumentParser(prog="mc_step_profile.py", description=__doc__.splitlines()[0])
    p.add_argument("--presets", nargs="+", default=["cpu", "long"])
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--md", type=Path, default=None)
    p.add_argument("--table", type=Path, default=None,
                   help="also write each preset's op table of one profiled step (top 40 by self time) to TABLE.<preset>.txt")
    p.add_argument("overrides", nargs="*", help="config overrides applied to every preset")
    a = p.parse_args(argv)
    res = {"presets": {}}
    for preset in a.presets:
        cfg = load_config([f"preset={preset}", *a.overrides])
        table = None if a.table is None else a.table.with_name(f"{a.table.stem}.{preset}.txt")
        res["presets"][preset] = measure(cfg, reps=a.reps, table=table)
        print(f"[step-profile] {preset}: {json.dumps(res['presets'][preset])}", file=sys.stderr, flush=True)
    res["setup"] = {"device": device_name(str(setup_device(cfg))), "threads": torch.get_num_threads(),
                    "torch": torch.__version__, "date": date.today().isoformat(), "reps": a.reps,
                    "overrides": list(a.overrides)}
    write_results(res, to_markdown(res), json_path=a.json, md_path=a.md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
