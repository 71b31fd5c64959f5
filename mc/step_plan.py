"""Host half of a stage-2 micro-step: the variants, gather tables and LOD maps, as CPU tensors.

Owns :class:`StepPlan` and :func:`plan_micro_step` (and :class:`TrainStepOutput`, what the device half
returns): everything a micro-step decides in Python
(which working contexts each of the B sequences is read through, where every entry's embedding
comes from, the tokens the shared-tail loss scores, the LOD covering each token). It does no
device work, so it can run for the next micro-step while the device runs the current one
(:mod:`mc.train.prefetch`). ``MCController.train_step`` is ``run_step(prepare_step(...))``; the
device half (``run_step``) only moves the plan with ``non_blocking`` copies from pinned memory,
never waits on the host. See obsidian "Training" (host/device split).
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Sequence

import torch
from torch import Tensor

from mc.config import MCConfig
from mc.nets.losses import PreferenceResult
from mc.gather import gather_tables, token_ids_of
from mc.inputs import check_history_length
from mc.variants import sample_variants, variant_kinds

Spans = Sequence[tuple[int, int] | None] | None  # per training row: the queried record's token span, or None
SpanLists = Sequence[Sequence[tuple[int, int]]] | None  # per training row: the other records' token spans (decoys)
Ends = Sequence[int | None] | None  # per training row: where a refocus would have read up to (None: the row's end)


@dataclass
class StepPlan:
    """One micro-step's host-side decisions (R = B*V rows, W = the training bucket, T tokens)."""

    ids: Tensor  # [B, T] long: the token ids of the micro-batch
    index: Tensor  # [R, W] long: row of the flat level table per entry (the zero row for padding)
    lods: Tensor  # [R, W] long
    positions: Tensor  # [R, W] float32: span centres (0 for padding)
    token_ids: Tensor  # [R, W] long: id of each LOD0 entry, PAD_ID for gists and padding
    lengths: Tensor  # [R] long: real entries per row
    lod_map: Tensor  # [B, V, T] long: LOD of the entry covering each token
    focus_span: Tensor  # [B, 2] long: the queried record's token span, -1 -1 on corpus rows (focus loss)
    decoy: Tensor  # [B, V] bool: decoy layouts (mc.decoy_variants), which only the focus loss reads
    query_end: Tensor  # [B] long: the token index's query reads the tail up to here (T: all of it; mc.nets.token_index)
    batch: int  # B
    variants: int  # V (variant 0 = the recency baseline)

    def tensors(self) -> dict[str, Tensor]:
        return {f.name: getattr(self, f.name) for f in fields(self) if isinstance(getattr(self, f.name), Tensor)}

    def pinned(self) -> "StepPlan":
        """A copy in page-locked memory, so ``to(cuda)`` is an asynchronous copy (needs CUDA)."""
        return replace(self, **{k: v.pin_memory() for k, v in self.tensors().items()})

    def to(self, device: torch.device) -> "StepPlan":
        """On ``device``: non-blocking copies (truly asynchronous when the plan is pinned)."""
        return replace(self, **{k: v.to(device, non_blocking=True) for k, v in self.tensors().items()})


def plan_micro_step(ids_bt: Tensor, mc: MCConfig, bucket: int, generator: torch.Generator, *,
                    pin: bool = False, focus_spans: Spans = None, decoy_spans: SpanLists = None,
                    query_ends: Ends = None) -> StepPlan:
    """Sample ``1 + mc.n_random_variants`` working contexts per sequence of ``ids_bt [B, T]`` (CPU)
    and build their tables. Draws from ``generator`` exactly as the variant sampler does, in
    sequence order, so a plan made ahead of time equals one made on the spot. ``pin``: page-lock
    the result (for a CUDA device). ``focus_spans``: per sequence, the queried record's token span
    (None on corpus rows), for ``mc.guided_variants``; ``decoy_spans``: per sequence, the spans of the
    records that are not queried (empty on corpus rows), for ``mc.decoy_variants``
    (:func:`mc.variants.sample_variants`); ``query_ends``: per sequence, the first token a refocus would not have
    read yet (a recall row's answer; None = the end), where the token index's training query stops."""
    ids_bt = torch.as_tensor(ids_bt)
    if ids_bt.dim() != 2:
        raise ValueError(f"train_step: ids must be [B, T], got shape {tuple(ids_bt.shape)}")
    b, t = ids_bt.shape
    check_history_length(t, mc.history_tokens, mc.history_mix, "train_step")
    ids_bt = ids_bt.to("cpu", torch.long)  # the host half works on the host (a device tensor costs one sync here)
    if focus_spans is not None and len(focus_spans) != b:
        raise ValueError(f"train_step: {len(focus_spans)} focus spans for {b} sequences")
    if decoy_spans is not None and len(decoy_spans) != b:
        raise ValueError(f"train_step: {len(decoy_spans)} decoy span lists for {b} sequences")
    ends = [t if e is None else int(e) for e in (query_ends or [None] * b)]
    if len(ends) != b or not all(mc.recent_tokens <= e <= t for e in ends):
        raise ValueError(f"train_step: query_ends must give one end per sequence ({b}), each in "
                         f"[mc.recent_tokens={mc.recent_tokens}, {t}] or None, got {ends}")
    wcs, kinds = [], []
    for r in range(b):
        focus, decoys = None if focus_spans is None else focus_spans[r], () if decoy_spans is None else decoy_spans[r]
        kinds.append(variant_kinds(mc.n_random_variants, n_guided=mc.guided_variants, n_decoy=mc.decoy_variants,
                                   has_focus=focus is not None, has_decoys=bool(decoys)))
        wcs += sample_variants(t, block_size=mc.block_size, max_lod=mc.max_lod, max_entries=mc.max_entries,
                               recent_tokens=mc.recent_tokens, n_random=mc.n_random_variants, generator=generator,
                               focus_span=focus, n_guided=mc.guided_variants, decoy_spans=decoys, n_decoy=mc.decoy_variants)
    v = len(wcs) // b
    tab = gather_tables(wcs, batch=b, tokens=t, max_lod=mc.max_lod, bucket=bucket)
    plan = StepPlan(ids=ids_bt, index=tab["index"], lods=tab["lods"], positions=tab["positions"],
                    token_ids=token_ids_of(ids_bt, tab["token_index"], v), lengths=tab["lengths"],
                    lod_map=tab["lod_map"].view(b, v, t), batch=b, variants=v,
                    focus_span=torch.tensor([list(sp) if sp is not None else [-1, -1]
                                             for sp in (focus_spans or [None] * b)], dtype=torch.long).view(b, 2),
                    decoy=torch.tensor([[k == "decoy" for k in row] for row in kinds], dtype=torch.bool).view(b, v),
                    query_end=torch.tensor(ends, dtype=torch.long))
    return plan.pinned() if pin else plan


@dataclass
class TrainStepOutput:
    """Everything one stage-2 micro-step produced (tensors stay on the device, no syncs)."""

    total: Tensor  # 0-d: lm + lens_loss_weight * preference + the weighted focus and content losses (backward this)
    lm_loss: Tensor  # 0-d: mean shared-tail loss over all variants (trains GistNet)
    tail_losses: Tensor  # [B, V] detached: per-variant shared-tail loss (variant 0 = baseline)
    preference: PreferenceResult  # LensNet's pairwise loss and accuracy
    scores: Tensor  # [B*V, W] LensNet scores (the helper's clone)
