"""Stage 2: train GistNet and LensNet through the MCController on top of the frozen base.

Owns :func:`train_stage2`. Every GistNet/LensNet use goes through the controller
(``controller.train_step``), never through the nets directly ([[MCController]]).

One optimiser step = ``grad_accum`` micro-steps of::

    plan = prefetch.next()       # made ahead in a thread: sampler.sample(B, T, gen) + controller.prepare_step
    out = controller.run_step(plan)                        # device half: losses -> preference, no sync
    (out.total / grad_accum).backward()
    controller.end_micro_step()                            # the one training step boundary

then per-net gradient clipping (norm 1), ``optimizer.step()`` and ``controller.zero_grad(optimizer)`` (which keeps
``.grad`` allocated when CUDA graphs run). When any compile mode is on, ``controller.warmup()``
runs every (bucket x mode) before the first step and freezes the compile cache. ``train.prefetch``
micro-steps of host work are made ahead (:class:`mc.train.prefetch.PlanPrefetcher`; 0 = inline; -1, the default,
= 2 on CUDA and inline on CPU).

Logged every ``train.log_every`` steps (and on eval/checkpoint steps) to ``run_dir/stage2/metrics.jsonl``,
means over the micro-steps since the last log (the one host sync of the loop): ``lm_loss`` (shared-tail loss over all
variants: what GistNet learns from), ``pref_loss`` / ``pref_acc`` (LensNet's pairwise loss and
the share of active entries whose score sign matches the target), ``baseline_loss``,
``best_loss`` (lowest variant loss per sequence, averaged) and ``gap`` = baseline - best,
``lr``, ``seq_per_s``; ``val_*`` of the same every ``eval_every`` steps on fixed validation
batches. Checkpoints (``controller.state_dict()``, optimizer, step, RNG incl. the data generator,
config, summary) go atomically to ``run_dir/stage2/ckpt.pt`` every ``ckpt_every`` steps and at the
end; an existing checkpoint is resumed, and one that reached ``train.stage2.steps`` returns at once.

Under torchrun (``bash run10.sh --nproc N``) GistNet + LensNet (not the frozen base) train under one
DDP instance that wraps the two aux modules and runs the controller's ``run_step`` as its forward
(the helpers stay the only call sites of the nets), each rank on its own data shard with the
per-rank batch of :func:`mc.train.distributed.per_rank_batch`; metrics are averaged over the
ranks, rank 0 alone evaluates and writes (see obsidian "Distributed training").
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

import mc.train.distributed as distributed
from mc.build import build_controller, stage1_base_path
from mc.compile.telemetry import Telemetry
from mc.config import MCConfig, RunConfig, to_dict
from mc.config_checks import validate
from mc.controller import MCController
from mc.io import clean_stale_tmp
from mc.train.checkpoint import DivergenceGuard, check_finite, load_checkpoint, require_keys, rng_state
from mc.train.common import check_resume_config, finish_loop, loop_io, resume_into, setup_device
from mc.train.optim import lr_at, make_optimizer, set_lr
from mc.train.prefetch import PlanPrefetcher, prefetch_depth

STAGE2_VAL_SEED_OFFSET = 104729  # stage-2 validation batches and variants: their own fixed-seed generator
DATA_SEED_OFFSET = 1  # stage 2 draws other batches than stage 1


def history_length(mc: MCConfig, gen: torch.Generator) -> int:
    """This micro-step's history length: ``mc.history_tokens``, or one of ``mc.history_mix`` drawn uniformly from
    ``gen`` (the batch and variant generator, so a resumed run draws the same lengths)."""
    if not mc.history_mix:
        return mc.history_tokens
    return int(mc.history_mix[int(torch.randint(len(mc.history_mix), (1,), generator=gen))])


def step_stats(out) -> dict[str, torch.Tensor]:
    """Detached 0-d tensors of one micro-step (no host sync here; the caller sums, then syncs once)."""
    tails = out.tail_losses  # [B, V], variant 0 = recency baseline
    best = tails.min(dim=1).values
    return {"lm_loss": out.lm_loss.detach(), "pref_loss": out.preference.loss.detach(),
            "pref_acc": out.preference.accuracy.detach(), "baseline_loss": tails[:, 0].mean(),
            "best_loss": best.mean(), "gap": (tails[:, 0] - best).mean(),
            "active_pairs": out.preference.active_pairs.detach()}


def _mean_stats(acc: list[dict[str, torch.Tensor]]) -> dict[str, float]:
    keys = acc[0].keys()
    stacked = torch.stack([torch.stack([a[k].float() for k in keys]) for a in acc]).mean(0).tolist()  # one sync
    return dict(zip(keys, stacked))


def evaluate_stage2(controller: MCController, sampler, cfg: RunConfig) -> dict[str, float]:
    """Mean step statistics over ``eval_batches`` fixed validation batches (no parameter update).

    Eager training nets run under ``no_grad``. When a training compile mode is on, the forward
    runs with grad enabled instead (the cache entry warm-up recorded; a no-grad call would be a
    new graph and, after the freeze, a recompile error) and the step is closed with
    ``end_micro_step()`` without a backward, the documented CUDA-graph-trees pattern.
    """
    st = cfg.train.stage2
    gen = torch.Generator().manual_seed(cfg.train.seed + STAGE2_VAL_SEED_OFFSET)
    acc = []
    with_grad = cfg.compile.is_on("train")
    for _ in range(st.eval_batches):
        batch = sampler.sample(st.batch_size, cfg.mc.history_tokens, gen)
        with torch.set_grad_enabled(with_grad):
            out = controller.train_step(batch.tokens, gen, batch.queried_spans(), decoy_spans=batch.other_record_spans(),
                                        query_ends=batch.query_ends())
            stats = step_stats(out)
        del out
        controller.end_micro_step()
        acc.append(stats)
    return {f"val_{k}": v for k, v in _mean_stats(acc).items()}


def train_stage2(cfg: RunConfig, run_dir: str | Path, *, progress: bool = True, max_files: int | None = None,
                 stop_after: int | None = None) -> dict[str, Any]:
    """Train (or resume, or skip when done) GistNet + LensNet; returns a summary dict.

    Needs ``run_dir/stage1/base.pt`` (not with ``model=hf``: the loaded model is the base). ``max_files`` caps the stdlib corpus (tests);
    ``stop_after`` stops after that many optimizer steps in total (checkpoint written), as if
    the process had been interrupted.
    """
    validate(cfg)
    st = cfg.train.stage2
    run_dir = Path(run_dir)
    out_dir = run_dir / "stage2"
    out_dir.mkdir(parents=True, exist_ok=True)
    ckpt_path = out_dir / "ckpt.pt"
    clean_stale_tmp(out_dir)  # a checkpoint write a killed run left half-done
    saved = load_checkpoint(ckpt_path) if ckpt_path.exists() else None
    if saved is not None:
        require_keys(saved, ("controller", "optimizer", "step", "rng", "config"), ckpt_path)
        check_finite(saved, ckpt_path, fix="training cannot resume from it: delete it to start stage 2 again")
        check_resume_config(saved["config"], cfg, "stage2", ckpt_path)
        if saved["step"] >= st.steps:
            return dict(saved.get("summary") or {}, skipped=True)

    dist = distributed.current()  # torchrun: this rank (one device, a data shard); else a no-op
    lcfg = dist.local(cfg)  # per-rank micro-batch: the shape this rank's controller warms up and trains at
    lst = lcfg.train.stage2
    device = dist.place(setup_device(cfg))
    telemetry = Telemetry.from_config(cfg.telemetry, run_dir if dist.is_main else None, device=device)
    telemetry.tags = dist.tags()  # rank and world_size on every event under torchrun
    controller = build_controller(lcfg, device=device, base_weights=stage1_base_path(cfg, run_dir), telemetry=telemetry)
    controller.gistnet.train()
    controller.lensnet.train()
    optimizer = make_optimizer(controller.aux_parameters(), st)
    gen = torch.Generator().manual_seed(dist.data_seed(cfg.train.seed + DATA_SEED_OFFSET))  # batches and variants
    step = resume_into(saved, controller, "controller", optimizer)
    if saved is not None:  # say so: a resumed run must not look like a fresh one (or a silent no-op)
        print(f"[stage2] resuming from step {step} of {st.steps} ({ckpt_path})", flush=True)
    if cfg.compile.any_on:
        # Before the RNG restore: warm-up draws random inputs, and an uninterrupted run's RNG
        # state after its warm-up is exactly what the checkpoint saved.
        controller.warmup()
    if saved is not None:
        dist.restore_rng(saved, gen, seed=cfg.train.seed + DATA_SEED_OFFSET)
    # DDP over the trainable nets only (after warm-up: the compile cache is frozen before DDP exists)
    trainable = {"gistnet": controller.gistnet, "lensnet": controller.lensnet}
    aux = dist.wrap_aux(trainable if cfg.mc.freeze_base else {**trainable, "base": controller.base})
    train_data, val_data, metrics, summary = loop_io(cfg, out_dir, cfg.mc.history_tokens, saved, step,
                                                     max_files=max_files, metrics_log=dist.metrics_log)
    train_data = dist.shard(train_data)  # this rank's disjoint share of the training data

    # Host work of the next micro-steps (batch, variants, gather tables) runs in a thread while the
    # device runs this one; from here on only the prefetcher draws from `gen` (obsidian "Training").
    def make_plan():
        batch = train_data.sample(lst.batch_size, history_length(cfg.mc, gen), gen)
        return controller.prepare_step(batch.tokens, gen, batch.queried_spans(), decoy_spans=batch.other_record_spans(),
                                       query_ends=batch.query_ends())
    prefetch = PlanPrefetcher(make_plan, gen, depth=prefetch_depth(cfg.train.prefetch, device))

    guard = DivergenceGuard("stage2", ckpt_path, "train.stage2.lr", step if saved is not None else None)

    def checkpoint() -> None:  # the data RNG as of the last consumed plan, not the ones made ahead
        state = controller.state_dict()
        guard.check_weights(state, step)  # never overwrite the last good checkpoint with NaN weights
        dist.save(ckpt_path, {"controller": state, "optimizer": optimizer.state_dict(),
                              "step": step, "rng": rng_state(prefetch.consumed_generator()),
                              "config": to_dict(cfg), "summary": summary})
        guard.saved(step)

    # Clip each net on its own: one joint norm would let GistNet's LM gradient (or an unfrozen
    # base's) shrink LensNet's preference updates, coupling two objectives that share no weights.
    clip_groups = [list(controller.gistnet.parameters()), list(controller.lensnet.parameters())]
    if not cfg.mc.freeze_base:
        clip_groups.append(list(controller.base.parameters()))
    end = st.steps if stop_after is None else min(st.steps, stop_after)
    bar = tqdm(total=st.steps, initial=step, desc="stage2", disable=not (progress and dist.is_main), dynamic_ncols=True)
    acc: list[dict[str, torch.Tensor]] = []
    t_log, seqs_since = time.perf_counter(), 0
    t_start, steps_run = time.perf_counter(), 0
    while step < end:
        lr = lr_at(step, st)
        set_lr(optimizer, lr)
        for micro in range(lst.grad_accum):
            plan = prefetch.next()
            with dist.micro_step(aux, last=micro == lst.grad_accum - 1):  # no_sync but on the last
                out = dist.forward(aux, lambda: controller.run_step(plan))
                (out.total / lst.grad_accum).backward()
            controller.end_micro_step()
            acc.append(step_stats(out))
            del out
        for group in clip_groups:
            torch.nn.utils.clip_grad_norm_(group, 1.0)
        optimizer.step()
        controller.zero_grad(optimizer)
        step += 1
        steps_run += 1
        seqs_since += st.batch_size * st.grad_accum  # the global batch (all ranks)
        bar.update(1)
        measure = step % st.eval_every == 0 or step == st.steps
        if not (step % cfg.train.log_every == 0 or measure or step == end or step % st.ckpt_every == 0):
            continue  # the metrics stay on the device until a log step: no host sync in this step
        rec: dict[str, Any] = {"step": step, **dist.mean(_mean_stats(acc), device), "lr": lr}
        acc = []
        guard.check_loss({"lm": rec["lm_loss"], "pref": rec["pref_loss"]}, step, lr)  # a checkpoint step logs too
        now = time.perf_counter()
        rec["seq_per_s"] = seqs_since / max(now - t_log, 1e-9)
        if measure and dist.is_main:  # the other ranks wait at the next all-reduce
            rec.update(evaluate_stage2(controller, val_data, lcfg))
            summary.update({k: v for k, v in rec.items() if k.startswith("val_")})
        metrics.write(rec)
        summary.update(steps=step, lm_loss=rec["lm_loss"], pref_loss=rec["pref_loss"], pref_acc=rec["pref_acc"],
                       gap=rec["gap"], seq_per_s=rec["seq_per_s"])
        bar.set_postfix(lm=f"{rec['lm_loss']:.3f}", pref=f"{rec['pref_acc']:.2f}", gap=f"{rec['gap']:.3f}")
        t_log, seqs_since = time.perf_counter(), 0
        if step % st.ckpt_every == 0 and step < end:
            checkpoint()
    prefetch.close()
    if dist.enabled:  # each rank's compile counters (zero recompiles is a per-rank guarantee)
        summary["ranks"] = dist.gather(distributed.compile_summary(dist.rank, controller.telemetry))
    finish_loop(bar, summary, step, steps_run, t_start, checkpoint)
    metrics.close()
    controller.telemetry.close()
    return dict(summary, skipped=False)
