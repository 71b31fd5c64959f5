"""Distillation from the base over the whole history: a dense target for GistNet (``mc.distill_weight``).

Owns :func:`full_history_distill` (what the controller's step calls), made of :func:`full_history_tail_logits` (the teacher: the frozen base over the raw history, no gists, no
grad) and :func:`distill_tail_loss` (per variant row, the KL from that teacher to the base reading the
row's working context, over the shared LOD0 tail).

Why: stage 2's LM loss is the next-token cross-entropy of one sampled token per tail position. On a real
model the gap between a working context and the full history is a small shift in a 49k-way distribution,
and one-hot targets measure it with a lot of noise. The teacher's whole distribution at each tail position
says exactly what the gisted history should have let the base predict, so a few hundred steps carry more
signal (obsidian Training, "Distillation from the full history"). The teacher costs one forward over the
history per sequence (no backward); the student logits are the step's own.

Both tails line up because every variant keeps the last ``recent_tokens`` tokens at LOD0 and they are the
history's last tokens: row r's entries ``[len_r - R, len_r)`` are history tokens ``[T - R, T)``.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.profiler import record_function

from mc.nets.gpt import at_positions
from mc.nets.losses import tail_positions


def full_history_tail_logits(base_logits: Callable[..., Tensor], embeds_btd: Tensor, recent_tokens: int) -> Tensor:
    """The teacher's logits at the tail's prediction positions: ``[B, R - 1, V]`` (R = ``recent_tokens``).

    ``base_logits(embeds, positions, lods, mask)`` is the controller's base call; ``embeds_btd`` the history's
    token embeddings. Position i of the result predicts history token ``T - R + 1 + i``.
    """
    b, t, _ = embeds_btd.shape
    if not 2 <= recent_tokens <= t:
        raise ValueError(f"full_history_tail_logits: recent_tokens={recent_tokens} must be in [2, T={t}]")
    positions = torch.arange(t, device=embeds_btd.device).expand(b, t)  # [B, T] LOD0 centres = token indices
    lods = torch.zeros_like(positions)
    mask = torch.ones(b, t, dtype=torch.bool, device=embeds_btd.device)
    at = positions[:, t - recent_tokens:t - 1]  # [B, R - 1]: the LM head runs at the tail alone
    with torch.no_grad(), record_function("mc.step.teacher"):  # its own phase in scripts/mc_step_profile.py
        return base_logits(embeds_btd.detach(), positions, lods, mask, logit_index=at)  # [B, R - 1, V]


def distill_tail_loss(logits_rwv: Tensor, lengths_r: Tensor, teacher_bqv: Tensor, recent_tokens: int) -> Tensor:
    """Per row ``[R]``: mean over the tail's ``R - 1`` predictions of KL(teacher || student).

    ``logits_rwv`` ``[B*V, W, vocab]`` the step's logits (rows grouped by sequence, V variants each),
    ``lengths_r`` ``[B*V]`` real entries per row, ``teacher_bqv`` ``[B, R - 1, vocab]`` from
    :func:`full_history_tail_logits`.
    """
    rows, _, vocab = logits_rwv.shape
    b, q, tv = teacher_bqv.shape
    if q != recent_tokens - 1 or tv != vocab or rows % b or lengths_r.shape != (rows,):
        raise ValueError(f"distill_tail_loss: logits {tuple(logits_rwv.shape)}, lengths {tuple(lengths_r.shape)} and "
                         f"teacher {tuple(teacher_bqv.shape)} do not fit recent_tokens={recent_tokens}")
    idx = tail_positions(lengths_r, recent_tokens)  # [R, q]
    return tail_kl(at_positions(logits_rwv, idx), teacher_bqv)


def tail_kl(student_rqv: Tensor, teacher_bqv: Tensor) -> Tensor:
    """Per row ``[R]``: mean over the tail's predictions of KL(teacher || student), with the student's logits
    already at the tail (``[B*V, q, vocab]``, rows grouped by sequence) and the teacher's ``[B, q, vocab]``."""
    rows, q, vocab = student_rqv.shape
    b = teacher_bqv.shape[0]
    if teacher_bqv.shape[1:] != (q, vocab) or rows % b:
        raise ValueError(f"tail_kl: student {tuple(student_rqv.shape)} and teacher {tuple(teacher_bqv.shape)} do not "
                         "fit [B*V, q, vocab] / [B, q, vocab]")
    student = student_rqv.view(b, rows // b, q, vocab)
    # the teacher's log-probabilities once per sequence, broadcast over its V variant rows (no copy)
    teacher = F.log_softmax(teacher_bqv.float(), -1).unsqueeze(1)  # [B, 1, q, vocab]
    kl = F.kl_div(F.log_softmax(student.float(), -1), teacher.expand_as(student), log_target=True,
                  reduction="none").sum(-1).view(rows, q)  # [R, q]
    return kl.mean(-1)


def full_history_distill(base_logits: Callable[..., Tensor], embeds_btd: Tensor, student_rqv: Tensor,
                         recent_tokens: int) -> Tensor:
    """The step's distillation term per row ``[B*V]``: the teacher over ``embeds_btd`` ``[B, T, D]``, then the KL
    to the step's own tail logits ``student_rqv`` (at :func:`mc.nets.losses.tail_positions`)."""
    return tail_kl(student_rqv, full_history_tail_logits(base_logits, embeds_btd, recent_tokens))
