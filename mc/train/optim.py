"""Optimiser and learning-rate schedule shared by the stage-1 and stage-2 loops.

Owns: :func:`make_optimizer` (AdamW; weight decay only on matrices, never on norms/biases/1-d
gains) and :func:`lr_at` / :func:`set_lr` (linear warm-up, then cosine decay to ``min_ratio`` of
the peak; past ``steps``, which only stage 1's copy gate reaches, a warm restart at ``RESTART_RATIO`` of
the peak decaying by cosine to ``min_ratio`` at the gate's cap, :func:`stage1_cap`). The schedule is a
pure function of the step, so a resumed run sets the same learning rate as an uninterrupted one without
saving any scheduler state.
"""
from __future__ import annotations

import math
from typing import Iterable

import torch

from mc.config import StageConfig

MIN_LR_RATIO = 0.1  # cosine decays to 10% of the peak, not to 0: the last steps still learn
# The copy gate's restart: a base that has not formed the copy by the end of its schedule formed it from about half
# the peak (long_corpus seed 2; obsidian Training, "Stage-1 copy gate"); at the decayed 10% it barely moved.
RESTART_RATIO = 0.5


def make_optimizer(params: Iterable[torch.nn.Parameter], stage: StageConfig) -> torch.optim.AdamW:
    """AdamW over ``params`` (those with ``requires_grad``); decay on >= 2-d tensors only.

    Raises ValueError when nothing is trainable (e.g. a frozen module list was passed by mistake).
    """
    params = [p for p in params if p.requires_grad]
    if not params:
        raise ValueError("make_optimizer: no trainable parameters (all have requires_grad=False)")
    seen: set[int] = set()
    decay, no_decay = [], []
    for p in params:
        if id(p) in seen:  # a parameter shared by two modules must appear once
            continue
        seen.add(id(p))
        (decay if p.dim() >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": stage.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    groups = [g for g in groups if g["params"]]
    return torch.optim.AdamW(groups, lr=stage.lr, betas=(0.9, 0.95), eps=1e-8)


def lr_at(step: int, stage: StageConfig, *, min_ratio: float = MIN_LR_RATIO) -> float:
    """Learning rate for optimiser step ``step`` (0-based): linear warm-up, then cosine decay."""
    if step < 0:
        raise ValueError(f"lr_at: step must be >= 0, got {step}")
    peak = stage.lr
    cap = stage1_cap(stage)  # Stage1Config with the copy gate on: its extension (mc.train.stage1); else steps
    if step >= stage.steps and cap > stage.steps:
        frac = min(1.0, (step - stage.steps) / (cap - stage.steps))
        return peak * (min_ratio + (RESTART_RATIO - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * frac)))
    warm = max(0, min(stage.warmup_steps, stage.steps))
    if warm and step < warm:
        return peak * (step + 1) / warm
    decay_steps = max(1, stage.steps - warm)
    frac = min(1.0, (step - warm) / decay_steps)
    return peak * (min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * frac)))


def stage1_cap(stage: StageConfig) -> int:
    """The last step a stage can reach: ``steps``, or with stage 1's copy gate on, ``steps x max_steps_factor``
    rounded down (``train.stage1.query_loss_target`` > 0; obsidian Training, "Stage-1 copy gate")."""
    if not getattr(stage, "query_loss_target", 0):
        return stage.steps
    return int(stage.steps * stage.max_steps_factor)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
