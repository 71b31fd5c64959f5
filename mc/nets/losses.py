"""Stage-2 objectives: the shared-tail next-token loss, and LensNet's pairwise preference loss.

Everything here is vectorised on the device: no ``.item()``, no Python loop over entries or pairs.

Shared-tail loss. Every variant of a training sequence keeps the last ``recent_tokens`` tokens at
LOD0 (the recent-tail invariant), so the predictions of tail tokens 2..R from their LOD0
predecessors exist in every variant: comparing variants on exactly those positions is fair.
Gist positions predict nothing.

Preference loss. For two variants a, b of one sequence with tail losses l_a < l_b, a is
preferred. Map both to the token axis (``lod_map``: the LOD covering each token) and take
``delta[t] = lod_b[t] - lod_a[t]``: positive where the preferred variant keeps *more* detail.
For every entry e of either variant the target is ``sign(mean(delta over e's span))``: +1 asks
LensNet to expand there, -1 to collapse, 0 (no difference) carries no signal. The per-entry
logistic (Bradley-Terry) loss is ``softplus(-beta * target * score)``, i.e. ``-log P`` with
``P = sigmoid(beta * target * score)``, weighted by the pair's loss gap (normalised by the mean
gap of the batch, detached) so that confident preferences count more.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from mc.nets.gpt import at_positions


def tail_loss_mask(lengths_r: Tensor, width: int, recent_tokens: int) -> Tensor:
    """``[R, W]`` bool: True at target positions whose prediction every variant shares.

    Row r's real entries are ``[0, lengths_r[r])`` and its last ``recent_tokens`` entries are the
    LOD0 tail. Target j is predicted from position j-1, so targets ``[len-R+1, len)`` have a LOD0
    predecessor inside the tail in every variant.
    """
    j = torch.arange(width, device=lengths_r.device)  # [W]
    first = (lengths_r - recent_tokens + 1).unsqueeze(1)  # [R, 1]
    return (j.unsqueeze(0) >= first) & (j.unsqueeze(0) < lengths_r.unsqueeze(1))


def shared_tail_loss(logits_rwv: Tensor, token_ids_rw: Tensor, lengths_r: Tensor, recent_tokens: int) -> Tensor:
    """Per-row mean next-token loss over the shared LOD0 tail: ``[R]``, from logits at every entry.

    ``logits_rwv[:, i]`` predicts ``token_ids_rw[:, i + 1]``; the shift happens here. The targets are those of
    :func:`tail_loss_mask` (every row holds at least ``recent_tokens`` entries); the step computes the same loss from
    the tail's logits alone (:func:`base_tail_loss`).
    """
    r, w, _ = logits_rwv.shape
    if token_ids_rw.shape != (r, w) or lengths_r.shape != (r,):
        raise ValueError(f"shared_tail_loss: logits {tuple(logits_rwv.shape)}, token_ids {tuple(token_ids_rw.shape)}, "
                         f"lengths {tuple(lengths_r.shape)} do not agree on [R, W]")
    at = tail_positions(lengths_r, recent_tokens)  # [R, recent - 1]
    return tail_token_loss(at_positions(logits_rwv, at), token_ids_rw, at)


def tail_positions(lengths_r: Tensor, recent_tokens: int) -> Tensor:
    """``[R, recent_tokens - 1]`` long: the entries whose predictions :func:`shared_tail_loss` scores, row r's
    ``[len_r - recent_tokens, len_r - 1)``. The step runs the base's LM head at these alone (``logit_index``):
    with a real vocabulary (SmolLM2: 49,152) the head over every entry is a third of the base's forward."""
    if recent_tokens < 2:
        raise ValueError(f"tail_positions needs recent_tokens >= 2 (got {recent_tokens}): the tail must hold a prediction")
    start = (lengths_r - recent_tokens).clamp(min=0)  # every variant keeps recent_tokens LOD0 entries: len >= it
    return start.unsqueeze(1) + torch.arange(recent_tokens - 1, device=lengths_r.device)


def tail_token_loss(logits_rqv: Tensor, token_ids_rw: Tensor, positions_rq: Tensor) -> Tensor:
    """:func:`shared_tail_loss` from logits computed only at ``positions_rq`` (:func:`tail_positions`): ``[R]``,
    each row's mean next-token loss in float32 (the same pairs, the same value up to matmul rounding)."""
    if logits_rqv.shape[:2] != positions_rq.shape or token_ids_rw.shape[0] != positions_rq.shape[0]:
        raise ValueError(f"tail_token_loss: logits {tuple(logits_rqv.shape)}, positions {tuple(positions_rq.shape)} "
                         f"and token_ids {tuple(token_ids_rw.shape)} do not agree on [R, Q]")
    targets = token_ids_rw.gather(1, positions_rq + 1)  # [R, Q]: position i predicts entry i + 1
    ce = F.cross_entropy(logits_rqv.float().flatten(0, 1), targets.flatten(), reduction="none")
    return ce.view(targets.shape).mean(-1)


def base_tail_loss(base_logits, embeds_rwd: Tensor, positions: Tensor, lods: Tensor, mask: Tensor, token_ids_rw: Tensor,
                   lengths_r: Tensor, recent_tokens: int) -> tuple[Tensor, Tensor]:
    """The base over working contexts with its LM head at the tail alone, and the tail loss: ``(loss [R], logits
    [R, recent - 1, V])``. ``base_logits`` is the controller's; the step and its cost floor (the step profile, the
    GPU sync check) both call this, so the floor does the step's base work exactly."""
    at = tail_positions(lengths_r, recent_tokens)
    logits = base_logits(embeds_rwd, positions, lods, mask, logit_index=at)
    return tail_token_loss(logits, token_ids_rw, at), logits


@dataclass
class PreferenceResult:
    loss: Tensor  # 0-d, differentiable w.r.t. the scores
    accuracy: Tensor  # 0-d: share of active entries whose score sign matches the target
    active_entries: Tensor  # 0-d: entries that carried a preference (float)
    active_pairs: Tensor  # 0-d: pairs whose loss gap passed min_gap (float)


def pair_indices(n_variants: int, device=None) -> tuple[Tensor, Tensor]:
    """All unordered pairs (i < j) of ``n_variants``: two ``[P]`` long tensors."""
    i, j = torch.triu_indices(n_variants, n_variants, offset=1, device=device)
    return i, j


def entry_spans(positions: Tensor, lods: Tensor, block_size: int) -> tuple[Tensor, Tensor]:
    """Start and width (long) of each entry from its centre position and LOD (same shape as inputs)."""
    width = torch.pow(torch.full_like(lods, block_size), lods)  # K ** lod, elementwise on the device
    start = torch.round(positions - (width.to(positions.dtype) - 1) / 2).to(torch.long)
    return start, width


def preference_loss(
    scores_bvw: Tensor,
    mask_bvw: Tensor,
    positions_bvw: Tensor,
    lods_bvw: Tensor,
    lod_map_bvt: Tensor,
    losses_bv: Tensor,
    *,
    block_size: int,
    beta: float,
    min_gap: float,
    exclude_bv: Tensor | None = None,
) -> PreferenceResult:
    """Per-entry Bradley-Terry loss from all variant pairs of every sequence (see module doc).

    Shapes: B sequences, V variants each, W padded entries, T history tokens.
    ``scores_bvw`` are LensNet's tanh scores; ``mask_bvw`` True for real entries;
    ``lod_map_bvt`` the LOD covering each token; ``losses_bv`` the shared-tail losses (detached here);
    ``exclude_bv`` (bool, optional): variants that take part in no pair (decoy layouts).
    """
    b, v, w = scores_bvw.shape
    t = lod_map_bvt.shape[-1]
    for name, x in (("mask", mask_bvw), ("positions", positions_bvw), ("lods", lods_bvw)):
        if x.shape != (b, v, w):
            raise ValueError(f"preference_loss: {name} has shape {tuple(x.shape)}, expected {(b, v, w)}")
    if lod_map_bvt.shape[:2] != (b, v) or losses_bv.shape != (b, v):
        raise ValueError(f"preference_loss: lod_map {tuple(lod_map_bvt.shape)} / losses {tuple(losses_bv.shape)} "
                         f"do not match [B={b}, V={v}, T]")
    if v < 2:
        raise ValueError("preference_loss needs at least two variants per sequence")
    dev = scores_bvw.device
    losses = losses_bv.detach().float()
    pi, pj = pair_indices(v, dev)  # [P]
    gap = losses[:, pj] - losses[:, pi]  # [B, P]: > 0 means variant i is preferred
    pref = torch.where(gap > 0, pi, pj)  # [B, P] preferred variant
    other = torch.where(gap > 0, pj, pi)
    valid = gap.abs() >= min_gap  # [B, P]
    if exclude_bv is not None:
        valid = valid & ~(exclude_bv[:, pi] | exclude_bv[:, pj])
    weight = gap.abs() * valid
    weight = weight / (weight.sum() / valid.sum().clamp_min(1)).clamp_min(1e-8)  # mean valid weight = 1

    lod_map = lod_map_bvt.to(torch.float32)
    pref_map = torch.gather(lod_map, 1, pref.unsqueeze(-1).expand(b, pref.shape[1], t))  # [B, P, T]
    other_map = torch.gather(lod_map, 1, other.unsqueeze(-1).expand(b, other.shape[1], t))
    delta = other_map - pref_map  # > 0 where the preferred variant is finer
    csum = F.pad(torch.cumsum(delta, dim=-1), (1, 0))  # [B, P, T+1]

    sides = torch.stack([pi, pj], dim=1)  # [P, 2]: both variants of each pair get targets
    p = sides.shape[0]
    idx = sides.view(1, p * 2, 1).expand(b, p * 2, w)

    def per_side(x: Tensor) -> Tensor:  # [B, V, W] -> [B, P, 2, W]
        return torch.gather(x, 1, idx).view(b, p, 2, w)

    start, width = entry_spans(positions_bvw, lods_bvw, block_size)
    start, width = per_side(start).clamp(0, t), per_side(width)
    end = (start + width).clamp(0, t)
    s_sum = torch.gather(csum, 2, start.view(b, p, 2 * w)).view(b, p, 2, w)
    e_sum = torch.gather(csum, 2, end.view(b, p, 2 * w)).view(b, p, 2, w)
    target = torch.sign(e_sum - s_sum)  # [B, P, 2, W] in {-1, 0, 1}

    active = per_side(mask_bvw.to(torch.float32)) * (target != 0) * valid.view(b, p, 1, 1)
    s = per_side(scores_bvw)
    per_entry = F.softplus(-beta * target * s)
    n_active = active.sum()
    loss = (per_entry * active * weight.view(b, p, 1, 1)).sum() / n_active.clamp_min(1)
    correct = ((torch.sign(s.detach()) == target) * active).sum()
    return PreferenceResult(
        loss=loss,
        accuracy=correct / n_active.clamp_min(1),
        active_entries=n_active,
        active_pairs=valid.sum().to(torch.float32),
    )


FOCUS_SCALE = 5.0  # tanh scores (-1, 1) -> softmax logits (-5, 5): a winner can take ~all the mass among ~100 gists


def focus_loss(scores_bvw: Tensor, mask_bvw: Tensor, positions_bvw: Tensor, lods_bvw: Tensor, span_b2: Tensor, *,
               block_size: int) -> Tensor:
    """Cross-entropy that makes LensNet rank the gist(s) over a known span first among the gists.

    ``span_b2 [B, 2]`` is the queried record's token span per sequence (``-1, -1`` for corpus rows).
    For every variant whose layout holds part of the span under a gist, the softmax over its gists
    of ``FOCUS_SCALE * score`` should put its mass on the gists overlapping the span (all of them
    together: a record across two blocks has two). Rows without such a gist carry no loss. Why next
    to the preference loss: the preference targets say *whether* an entry should be finer, entry by
    entry, so every entry that usually helps (recent gists, the record's gist) saturates at +1 and
    the allocator cannot tell them apart; this loss asks for a ranking, which is what the relative
    allocator reads (obsidian LensNet, "Focus loss"). Returns a 0-d tensor (0 when nothing applies)."""
    b, v, w = scores_bvw.shape
    if span_b2.shape != (b, 2):
        raise ValueError(f"focus_loss: span has shape {tuple(span_b2.shape)}, expected {(b, 2)}")
    start, width = entry_spans(positions_bvw, lods_bvw, block_size)
    s0, s1 = span_b2[:, 0].view(b, 1, 1), span_b2[:, 1].view(b, 1, 1)
    gist = mask_bvw & (lods_bvw > 0)
    over = gist & (start < s1) & (s0 < start + width) & (s0 >= 0)  # [B, V, W] the gists over the record
    return target_set_ce(FOCUS_SCALE * scores_bvw, gist, over)


def target_set_ce(logits: Tensor, candidates: Tensor, targets: Tensor) -> Tensor:
    """Mean over rows with a target of ``-log`` (the softmax mass, over each row's ``candidates`` on the last axis,
    of its ``targets``, a subset of them): the focus and index losses. 0 when no row has a target."""
    neg_inf = torch.finfo(logits.dtype).min
    lse_all = torch.logsumexp(logits.masked_fill(~candidates, neg_inf), dim=-1)
    lse_tgt = torch.logsumexp(logits.masked_fill(~targets, neg_inf), dim=-1)
    rows = targets.any(-1).to(logits.dtype)
    return ((lse_all - lse_tgt) * rows).sum() / rows.sum().clamp_min(1.0)


def index_locate_loss(match_bt: Tensor, span_b2: Tensor, recent_tokens: int) -> Tensor:
    """Cross-entropy that puts the token index's match on the queried record's tokens.

    ``match_bt [B, T]`` is the index's per-token match (:func:`mc.nets.token_index.training_match`), ``span_b2
    [B, 2]`` the queried record's token span (``-1, -1`` on corpus rows, which carry no loss). The softmax over the
    history's tokens (the LOD0 tail excluded: it holds the question, which matches itself) should put its mass on
    the record's. Why a loss of its own: LensNet's losses reach the index only through the entry's span maximum and a
    gain, and a net can settle on "a record is here" (every record's separator matches) without learning which key
    the question names; the record's decoys are in this softmax's denominator (obsidian LensNet, "Token index").
    Returns a 0-d tensor (0 when no row has a record before the tail)."""
    b, t = match_bt.shape
    if span_b2.shape != (b, 2):
        raise ValueError(f"index_locate_loss: span has shape {tuple(span_b2.shape)}, expected {(b, 2)}")
    pos = torch.arange(t, device=match_bt.device).view(1, t)
    hist = pos < t - recent_tokens  # [1, T]
    over = hist & (pos >= span_b2[:, :1]) & (pos < span_b2[:, 1:]) & (span_b2[:, :1] >= 0)  # [B, T]
    return target_set_ce(match_bt.float(), hist.expand(b, t), over)


def span_token_presence(ids_bt: Tensor, vocab: int, block_size: int, max_lod: int) -> list[Tensor]:
    """Per tree level 1..max_lod, ``[B, T / K**L, vocab]`` bool: which token ids occur under each gist's span.
    Level L is built from level L-1 by an ``any`` over K siblings, as the tree builds its gists."""
    b, t = ids_bt.shape
    # scatter, not F.one_hot: no host sync for a range check (the ids already went through the base's embedding)
    present = torch.zeros(b, t, vocab, dtype=torch.bool, device=ids_bt.device)
    present.scatter_(2, ids_bt.unsqueeze(-1), True)  # [B, T, V]
    out = []
    for _ in range(max_lod):
        present = present.view(b, present.shape[1] // block_size, block_size, vocab).any(dim=2)
        out.append(present)
    return out


def gist_content_loss(gists_by_level: list[Tensor], ids_bt: Tensor, head: torch.nn.Module, block_size: int) -> Tensor:
    """Content loss of the gists: from each gist, a linear ``head`` predicts which vocabulary items occur
    in its span, a multi-label BCE balanced per vocabulary item, summed over the vocabulary, averaged over
    gists, then over levels.

    ``gists_by_level[L-1]`` is level L, ``[B, T / K**L, D]``. Why: nothing else asks a coarse gist to keep a
    rare token. The LM loss reads gists only through the base's next-token predictions, and a 512-token
    gist's record key did not survive that (a linear probe read its first letter at chance). Why balanced:
    a token that occurs under one gist in a hundred (a record's key letter) would otherwise weigh a hundredth
    of one that occurs under half of them, and an unbalanced head learnt to say "absent" (p = 0.1 on the key
    letters that were there, at every level). Each item's present and absent cases weigh half each, the
    weights taken from this batch's own frequencies at that level (clamped to one gist in N)."""
    targets = span_token_presence(ids_bt, head.out_features, block_size, len(gists_by_level))
    losses = []
    for gists_bnd, target_bnv in zip(gists_by_level, targets):
        logits = head(gists_bnd)  # [B, N, V]
        y = target_bnv.to(logits.dtype)
        n = y.shape[0] * y.shape[1]
        freq_v = y.mean(dim=(0, 1)).clamp(1.0 / n, 1.0 - 1.0 / n)  # [V] share of gists holding the item
        weight_bnv = torch.where(target_bnv, 0.5 / freq_v, 0.5 / (1.0 - freq_v))
        bce = F.binary_cross_entropy_with_logits(logits, y, weight=weight_bnv, reduction="none")
        losses.append(bce.sum(-1).mean())
    return torch.stack(losses).mean()


def stage2_objective(cfg, p, scores: Tensor, mask: Tensor, tail: Tensor, levels, gistnet, distill: Tensor | None = None,
                     token_match: Tensor | None = None):
    """One stage-2 micro-step's objective from its parts: ``(total, lm_loss, PreferenceResult)``.

    ``p`` is the step's plan on the device (:class:`mc.step_plan.StepPlan`), ``scores`` / ``mask``
    ``[R, W]`` LensNet's scores and the entries' mask, ``tail`` ``[R]`` the per-row shared-tail loss, ``levels``
    the tree levels ``gistnet`` made (the content loss reads the gist levels and, only when weighted, its
    ``content_head``), ``distill`` ``[R]`` the per-row KL from the full-history teacher
    (:mod:`mc.nets.distill`; ``None`` when ``mc.distill_weight`` is 0), ``token_match [B, T]`` the token index's
    per-token match (``None`` without an index). ``total`` = LM loss + ``mc.lens_loss_weight`` * preference (+ the
    focus, index, content and distillation losses when weighted).
    """
    mc = cfg.mc
    b, v, w = p.batch, p.variants, scores.shape[1]
    pref = preference_loss(scores.view(b, v, w), mask.view(b, v, w), p.positions.view(b, v, w),
                           p.lods.view(b, v, w), p.lod_map, tail.detach().view(b, v),
                           block_size=mc.block_size, beta=mc.pref_beta, min_gap=mc.min_loss_gap, exclude_bv=p.decoy)
    # Decoy layouts (mc.decoy_variants) feed the focus loss only: the base copies the wrong record there, and
    # GistNet lowering that loss would teach the base to hedge (obsidian Variant Sampler, "Decoys").
    kept = (~p.decoy).view(-1).to(tail.dtype) if mc.decoy_variants else None  # [R]
    lm_loss = tail.mean() if kept is None else (tail * kept).sum() / kept.sum()
    total = lm_loss + mc.lens_loss_weight * pref.loss
    if distill is not None:  # the teacher's whole distribution on the tail (obsidian Training, "Distillation")
        total = total + mc.distill_weight * (distill.mean() if kept is None else (distill * kept).sum() / kept.sum())
    if mc.focus_loss_weight:  # recall rows: rank the record's gist first (obsidian LensNet, "Focus loss")
        rank = focus_loss(scores.view(b, v, w), mask.view(b, v, w), p.positions.view(b, v, w), p.lods.view(b, v, w),
                          p.focus_span, block_size=mc.block_size)
        total = total + mc.focus_loss_weight * rank
    if mc.index_loss_weight and token_match is not None:  # recall rows: the index finds the queried record
        total = total + mc.index_loss_weight * index_locate_loss(token_match, p.focus_span, mc.recent_tokens)
    if cfg.gistnet.content_loss_weight:  # coarse gists keep rare tokens (obsidian GistNet)
        total = total + cfg.gistnet.content_loss_weight * gist_content_loss(levels[1:], p.ids, gistnet.content_head,
                                                                            mc.block_size)
    return total, lm_loss, pref
