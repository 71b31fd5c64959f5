"""Stage 1: pretrain the base GPT on LOD0 token windows with the ordinary next-token loss.

Owns :func:`train_stage1`. Data: windows of ``model.max_seq_len`` tokens from the configured
corpus mixed with generated recall documents of the same length (share ``data.recall_mix``), so
the base model learns the copy skill the recall task needs before stage 2 asks it to read
compressed contexts (see [[Data]]). Every ``eval_every`` steps the loss on ``eval_batches``
fixed validation batches (val split, fixed seed) is measured.

Outputs under ``run_dir/stage1/``: ``ckpt.pt`` every ``ckpt_every`` steps and at the end (model,
optimizer, step, RNG incl. the data generator, config, summary; atomic), ``metrics.jsonl`` (one
JSON per logged step: step, train_loss (the objective, query term included when on), lr, tokens_per_s,
and when measured val_loss and val_query_loss, the plain next-token loss and the loss on the recall
rows' query tokens, :func:`evaluate_base`) and, at
the end, ``base.pt`` (weights only: what stage 2 loads).

Copy gate (``train.stage1.query_loss_target`` > 0; obsidian Training, "Stage-1 copy gate"): a base whose
validation query loss is still above the target at ``steps`` has not learned the recall copy, and stage 2
would then train over a base that cannot answer. It trains on, from a warm restart of the learning rate
(:func:`mc.train.optim.lr_at`), measuring every ``eval_every`` steps, and stops at the first measurement
at or below the target, at the first that is no better than the best so far, or at its cap
(:func:`mc.train.optim.stage1_cap`). The weights kept are the best measured from ``steps`` on: the warm
restart can leave a base worse than the one it started from (seed 31 of ``long_corpus``: 0.034 at the
gate, 0.051 after 400 more steps), and training on must not cost the copy it was meant to improve. The
best weights wait in ``best.pt`` (so a resumed run keeps them; removed once ``base.pt`` is written); the
summary's ``copy_gate`` records the outcome (``stopped_at`` when the weights kept are an earlier step's).

Resume: an existing ``ckpt.pt`` restores everything and training continues at its step (same
batches, same losses as an uninterrupted run); when ``base.pt`` exists and the checkpoint has
reached ``train.stage1.steps`` the function returns the saved summary at once (``base.pt`` is
written only when stage 1 has finished, the gate's extension included).

Under torchrun (``bash run10.sh --nproc N``) the model trains under DDP, each rank on its own data
shard with the per-rank batch of :func:`mc.train.distributed.per_rank_batch`; the logged train loss
is the mean over the ranks; rank 0 alone evaluates and writes (see obsidian "Distributed training").
"""
from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

import mc.train.distributed as distributed
from mc.config import RunConfig, to_dict
from mc.config_checks import validate
from mc.data.split import VAL_SEED_OFFSET
from mc.io import clean_stale_tmp
from mc.nets.gpt import GPT, next_token_loss
from mc.train.checkpoint import (DivergenceGuard, check_finite, load_checkpoint, require_keys, rng_state,
                                 save_checkpoint)
from mc.train.common import check_resume_config, finish_loop, loop_io, resume_into, setup_device
from mc.train.optim import lr_at, make_optimizer, set_lr, stage1_cap


def _autocast(device: torch.device):
    # bf16 autocast on GPUs (the loss is computed in float32 by next_token_loss); full fp32 on CPU.
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def query_mask(batch, width: int) -> torch.Tensor:
    """``[B, T]`` bool, True at the targets of each recall row's query: its key letters, the ``=`` and the
    answer (``[query_start, answer_end)``, the tokens a copy from the record predicts) except a drawn separator
    (``RecallDoc.query_separator``: the query supplies it at evaluation, and a base that copies every value can still
    pay ~0.7 nats per separator character, obsidian Training); all False on corpus rows (their spans are -1).
    Indexed by the target, as :func:`next_token_loss` reads a mask. Without drawn separators it is what it was."""
    j = torch.arange(width)  # [T]
    q0, a1 = batch.query_start.unsqueeze(1), batch.answer_end.unsqueeze(1)  # [B, 1]
    mask = batch.is_recall.unsqueeze(1) & (j >= q0) & (j < a1)
    for row, doc in enumerate(batch.recall_docs):
        if doc is not None and doc.query_separator is not None:
            mask[row, doc.query_separator[0]:doc.query_separator[1]] = False
    return mask


def stage1_loss(logits, ids, batch, query_weight: float):
    """The stage-1 objective and its query part: ``(loss, query_loss)``, 0-d tensors (``query_loss`` None
    when ``query_weight`` is 0). ``loss`` is the next-token loss plus ``query_weight`` times the mean loss
    over the recall rows' query tokens (``data.recall.stage1_query_weight``; 0 when no row is recall)."""
    if not query_weight:  # off: the plain next-token loss, as before the option existed
        return next_token_loss(logits, ids), None
    # One cross-entropy serves both means (a second call over the whole [B, T, V] logits cost ~5% of stage 1).
    nll = next_token_loss(logits, ids, reduction="none")  # [B, T-1], every pair scored
    mask = query_mask(batch, ids.shape[1]).to(ids.device)[:, 1:]  # [B, T-1], indexed by the target as nll is
    query = torch.where(mask, nll, torch.zeros_like(nll)).sum() / mask.sum().clamp_min(1).to(nll.dtype)
    return nll.mean() + query_weight * query, query


@torch.no_grad()
def evaluate_base(model: GPT, sampler, cfg: RunConfig, device: torch.device) -> tuple[float, float]:
    """Mean next-token loss and mean query-token loss (recall rows; see :func:`query_mask`) over
    ``eval_batches`` fixed validation batches. The second says whether the base copies the query's key
    and answer from the record: near 0 when it does, ~6.5 nats on two key letters when it guesses."""
    st = cfg.train.stage1
    gen = torch.Generator().manual_seed(cfg.train.seed + VAL_SEED_OFFSET)
    was_training = model.training
    model.eval()
    total = query = 0.0
    for _ in range(st.eval_batches):
        batch = sampler.sample(st.batch_size, cfg.model.max_seq_len, gen)
        ids = batch.tokens.to(device)
        with _autocast(device):
            logits = model(ids)
            total += float(next_token_loss(logits, ids))
            query += float(next_token_loss(logits, ids, query_mask(batch, ids.shape[1]).to(device)))
    model.train(was_training)
    return total / st.eval_batches, query / st.eval_batches


def train_stage1(cfg: RunConfig, run_dir: str | Path, *, progress: bool = True, max_files: int | None = None,
                 stop_after: int | None = None) -> dict[str, Any]:
    """Pretrain (or resume, or skip when done) the base model; returns a summary dict.

    ``max_files`` caps the stdlib corpus (tests); ``stop_after`` stops after that many optimizer
    steps *in total* (a checkpoint is written there), as if the process had been interrupted.
    """
    validate(cfg)
    st = cfg.train.stage1
    out = Path(run_dir) / "stage1"
    out.mkdir(parents=True, exist_ok=True)
    ckpt_path, base_path, best_path = out / "ckpt.pt", out / "base.pt", out / "best.pt"
    clean_stale_tmp(out)  # a checkpoint write a killed run left half-done

    saved = load_checkpoint(ckpt_path) if ckpt_path.exists() else None
    if saved is not None:
        require_keys(saved, ("model", "optimizer", "step", "rng", "config"), ckpt_path)
        check_finite(saved, ckpt_path, fix="training cannot resume from it: delete it to start stage 1 again")
        check_resume_config(saved["config"], cfg, "stage1", ckpt_path)
        if base_path.exists() and saved["step"] >= st.steps:
            best_path.unlink(missing_ok=True)  # left by a kill between the final checkpoint and this cleanup
            return dict(saved.get("summary") or {}, skipped=True)
    elif base_path.exists() and st.steps == 0:
        return {"steps": 0, "skipped": True}

    dist = distributed.current()  # torchrun: this rank (one device, a data shard); else a no-op
    lst = dist.local(cfg).train.stage1  # per-rank micro-batch and accumulation (same global batch)
    device = dist.place(setup_device(cfg))
    torch.manual_seed(cfg.train.seed)
    model = GPT(cfg.model).to(device)
    model.train()
    optimizer = make_optimizer(model.parameters(), st)
    gen = torch.Generator().manual_seed(dist.data_seed(cfg.train.seed))  # batches (CPU generator: the samplers run on CPU)
    step = resume_into(saved, model, "model", optimizer)
    if saved is not None:  # say so: a resumed run must not look like a fresh one (or a silent no-op)
        print(f"[stage1] resuming from step {step} of {st.steps} ({ckpt_path})", flush=True)
        dist.restore_rng(saved, gen, seed=cfg.train.seed)
    net = dist.wrap(model)  # DDP under torchrun (broadcasts rank 0's weights), else the model itself
    train_data, val_data, metrics, summary = loop_io(cfg, out, cfg.model.max_seq_len, saved, step, max_files=max_files,
                                                     metrics_log=dist.metrics_log, stage1=True)
    train_data = dist.shard(train_data)  # this rank's disjoint share of the training documents

    guard = DivergenceGuard("stage1", ckpt_path, "train.stage1.lr", step if saved is not None else None)

    def checkpoint() -> None:  # a collective under torchrun (every rank's RNG state); rank 0 writes
        state = model.state_dict()
        guard.check_weights(state, step)  # never overwrite the last good checkpoint with NaN weights
        dist.save(ckpt_path, {"model": state, "optimizer": optimizer.state_dict(), "step": step,
                              "rng": rng_state(gen), "config": to_dict(cfg), "summary": summary})
        guard.saved(step)

    gate = float(st.query_loss_target)
    cap = stage1_cap(st)
    finished = step >= st.steps and (not gate or "copy_gate" in summary)
    end = cap if stop_after is None else min(cap, stop_after)
    query_weight = float(cfg.data.recall.stage1_query_weight)
    log_every = max(1, min(st.eval_every, 10))
    tokens_per_step = st.batch_size * st.grad_accum * cfg.model.max_seq_len
    bar = tqdm(total=st.steps if step < st.steps else cap, initial=step, desc="stage1",
               disable=not (progress and dist.is_main), dynamic_ncols=True)
    t_log, tokens_since = time.perf_counter(), 0
    t_start, steps_run = time.perf_counter(), 0
    while step < end and not finished:
        lr = lr_at(step, st)
        set_lr(optimizer, lr)
        loss_sum = torch.zeros((), device=device)
        for micro in range(lst.grad_accum):
            batch = train_data.sample(lst.batch_size, cfg.model.max_seq_len, gen)
            ids = batch.tokens.to(device)
            with dist.micro_step(net, last=micro == lst.grad_accum - 1):  # no_sync but on the last
                with _autocast(device):
                    loss, _ = stage1_loss(net(ids), ids, batch, query_weight)
                (loss / lst.grad_accum).backward()
            loss_sum += loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        steps_run += 1
        tokens_since += tokens_per_step
        bar.update(1)
        measure = step % st.eval_every == 0 or step == st.steps or step == cap
        ckpt_due = step % st.ckpt_every == 0 and step < end
        if step % log_every == 0 or measure or step == end or ckpt_due:  # the loss is checked before every save
            train_loss = dist.mean({"loss": float(loss_sum) / lst.grad_accum}, device)["loss"]
            guard.check_loss({"train_loss": train_loss}, step, lr)
        if step % log_every == 0 or measure or step == end:
            now = time.perf_counter()
            rec = {"step": step, "train_loss": train_loss, "lr": lr, "tokens_per_s": tokens_since / max(now - t_log, 1e-9)}
            if measure and dist.is_main:  # the other ranks wait at the next all-reduce
                rec["val_loss"], rec["val_query_loss"] = evaluate_base(model, val_data, cfg, device)
                summary.update(val_loss=rec["val_loss"], val_query_loss=rec["val_query_loss"])
            metrics.write(rec)
            summary.update(steps=step, train_loss=train_loss, tokens_per_s=rec["tokens_per_s"])
            bar.set_postfix(loss=f"{train_loss:.3f}", **({"val": f"{rec['val_loss']:.3f}"} if "val_loss" in rec else {}))
            t_log, tokens_since = time.perf_counter(), 0
        if step >= st.steps and (not gate or measure):  # finished: the final checkpoint and base.pt follow the loop
            finished = not gate or _gate_done(summary, dist, gate, step, cap, st.steps, bar, model, best_path)
        if ckpt_due and not finished:
            checkpoint()
    finish_loop(bar, summary, step, steps_run, t_start, checkpoint)
    metrics.close()
    if finished and dist.is_main:
        save_checkpoint(base_path, model.state_dict())  # weights only (atomic too; finite: checked by checkpoint())
        best_path.unlink(missing_ok=True)
    return dict(summary, skipped=False)


def _gate_done(summary: dict[str, Any], dist, target: float, step: int, cap: int, steps: int, bar, model: GPT,
               best_path: Path) -> bool:
    """The copy gate at a measurement from ``steps`` on: True (and ``summary["copy_gate"]`` set) when the validation
    query loss is at or below ``target``, no better than the best measured since ``steps``, or ``cap`` is reached;
    the model then holds the best weights measured (rank 0 restores them from ``best_path``). Rank 0 measured;
    every rank takes its value (one collective, so all ranks stop at the same step)."""
    query = float(dist.gather(summary.get("val_query_loss", float("inf")))[0])
    met = query <= target  # then also the best: every earlier measurement from `steps` on was above the target
    best = summary.pop("copy_gate_best", None)  # {"step", "val_query_loss", "val_loss"}: the weights in best_path
    if best is not None and query >= best["val_query_loss"]:  # training on made the copy no better: keep the best
        summary["copy_gate"] = {"target": target, "met": False, "step": best["step"],
                                "val_query_loss": best["val_query_loss"], "stopped_at": step}
        summary.update(val_loss=best["val_loss"], val_query_loss=best["val_query_loss"])
        if dist.is_main:
            model.load_state_dict(load_checkpoint(best_path))
            print(f"[stage1] copy gate NOT met: validation query loss {query:.4f} at step {step}, no better than "
                  f"{best['val_query_loss']:.4f} at step {best['step']}: training on stops there and keeps step "
                  f"{best['step']}'s weights (the base may not have learned the recall copy)", flush=True)
        return True
    if met or step >= cap:
        summary["copy_gate"] = {"target": target, "met": met, "step": step, "val_query_loss": query}
        if (step > steps or not met) and dist.is_main:
            print(f"[stage1] copy gate {'met' if met else 'NOT met'} at step {step}: validation query loss "
                  f"{query:.4f} {'<=' if met else '>'} {target}" + ("" if met else " (the cap, "
                  "train.stage1.max_steps_factor): the base may not have learned the recall copy"), flush=True)
        return True
    summary["copy_gate_best"] = {"step": step, "val_query_loss": query, "val_loss": summary.get("val_loss")}
    if dist.is_main:
        save_checkpoint(best_path, model.state_dict())
    if step == steps:
        if dist.is_main:
            print(f"[stage1] copy gate: validation query loss {query:.4f} > {target} at step {steps}: training on, "
                  f"at most to step {cap} (train.stage1.max_steps_factor)", flush=True)
        bar.total = cap
        bar.refresh()
    return False
