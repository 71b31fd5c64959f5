"""The token index's exact-token queries: how much of what is asked now each history token, or tree node, holds.

Owns :func:`lexical_token_match`, the per-token value LensNet's token index hands on (a node's match is the maximum
over the tokens under it, :func:`mc.nets.token_index.span_max_levels`) when ``lensnet.index_query = "lexical"``,
and :func:`overlap_levels`, every tree level's node values when ``lensnet.index_query = "overlap"``.

Why: the learned index (``pooled``/``twin``) matched windows of token embeddings and, trained on one question form,
learned where the name sits in that form: over SmolLM2 it ranked the training records first in 93 of 96 documents
and the task suite's needles first in 0-1 of 12 (obsidian Evaluation, "The token index over SmolLM2"). The
non-learned ``salience`` locator, which found most of those needles, reads exact token identity instead. This
query gives LensNet that same evidence as an input, with no parameters of its own: LensNet's learned gain on the
match, and everything else it reads, decide how much it counts.

The value, per history: the query is the set of token ids in the ``r`` tokens before ``query_end`` (the question,
as it stands when a session refocuses); a token before that window scores its id's inverse frequency in the
history, ``log((n + 1) / (count + 0.5))`` clamped at 0, when its id is in the query, else 0, all divided by the
history's largest (so the rarest shared token scores 1). Tokens from the window on score 0: they are the question.

``overlap`` (why a second query): a node's maximum says only that *some* rare asked word is under it. In a
2048-token history many 64-token nodes hold a word the question shares once, and a distractor needle holds the
question's template words at nearly the key's weight (log-idf: 6.1 against 7.2), so the queried of four needles
had the strictly best LOD2 node in 35 of 72 documents (a probe over the task suite's multi-key documents, no nets;
obsidian LensNet, "The overlap query"). ``overlap`` scores a node by the *sum* over the distinct asked ids under
it of ``1 / count`` (the id's occurrences in the searched history): a word seen once weighs 1, a template word
repeated by four needles 1/4, a common word ~0; each level divided by its own best node. The same probe: 62 of 72.
"""
from __future__ import annotations

import torch
from torch import Tensor


def lexical_token_match(ids_bt: Tensor, query_end_b: Tensor, r: int) -> Tensor:
    """``[B, T]`` float in [0, 1]: see the module docstring. ``ids_bt [B, T]`` token ids, ``query_end_b [B]`` long
    (``T`` for a history whose question is its end), ``r`` the query window. No host sync."""
    if ids_bt.dim() != 2 or query_end_b.shape != ids_bt.shape[:1] or r < 1:
        raise ValueError(f"lexical_token_match needs ids [B, T], query_end [B] and r >= 1, got {tuple(ids_bt.shape)}, "
                         f"{tuple(query_end_b.shape)}, {r}")
    b, t = ids_bt.shape
    dev = ids_bt.device
    at = (query_end_b.view(-1, 1) - r + torch.arange(r, device=dev)).clamp(0, t - 1)  # [B, r]
    query = ids_bt.gather(1, at)  # [B, r]
    before = torch.arange(t, device=dev)[None] < (query_end_b.view(-1, 1) - r)  # [B, T]: the searched history
    eq = (ids_bt[:, :, None] == query[:, None, :]) & before[:, :, None]  # [B, T, r]
    count = eq.sum(1).float()  # [B, r]: each query token's occurrences before the window
    n = before.sum(1, keepdim=True).float()  # [B, 1]
    idf = torch.log((n + 1.0) / (count + 0.5)).clamp_min(0.0)  # [B, r]
    value = (eq.float() * idf[:, None, :]).amax(-1)  # [B, T]: a token's id idf if it is asked for (equal ids, equal idf)
    top = value.amax(-1, keepdim=True)  # [B, 1]
    return torch.where(top > 0, value / top.clamp_min(1e-6), torch.zeros_like(value))


def _query_presence(ids_bt: Tensor, query_end_b: Tensor, r: int) -> tuple[Tensor, Tensor]:
    """``[B, T, r]`` bool: token t is before the query window and equal to the window's j-th token, counted for the
    first occurrence of each id in the window only (distinct asked ids); ``[B, r]`` float: ``1 / count`` of each
    such id in the searched history (0 where it never occurs, or for a repeat within the window)."""
    b, t = ids_bt.shape
    dev = ids_bt.device
    at = (query_end_b.view(-1, 1) - r + torch.arange(r, device=dev)).clamp(0, t - 1)  # [B, r]
    query = ids_bt.gather(1, at)  # [B, r]
    earlier = torch.ones(r, r, dtype=torch.bool, device=dev).tril(-1)  # [j, j']: j' < j
    repeat = ((query[:, :, None] == query[:, None, :]) & earlier).any(-1)  # [B, r]
    before = torch.arange(t, device=dev)[None] < (query_end_b.view(-1, 1) - r)  # [B, T]
    eq = (ids_bt[:, :, None] == query[:, None, :]) & before[:, :, None] & ~repeat[:, None, :]  # [B, T, r]
    count = eq.sum(1).float()  # [B, r]
    return eq, torch.where(count > 0, 1.0 / count.clamp_min(1.0), torch.zeros_like(count))


def overlap_levels(ids_bt: Tensor, query_end_b: Tensor, r: int, block_size: int, levels: int) -> list[Tensor]:
    """``levels + 1`` tensors ``[B, T // K**L]`` in [0, 1]: level L's complete nodes (as the tree builds them), each
    the sum over the distinct asked ids under it of their ``1 / count`` weight, divided by the level's best node (0
    for a level where nothing is shared). Level 0 is the tokens themselves. See the module docstring; no host sync."""
    if ids_bt.dim() != 2 or query_end_b.shape != ids_bt.shape[:1] or r < 1 or block_size < 2 or levels < 0:
        raise ValueError(f"overlap_levels needs ids [B, T], query_end [B], r >= 1, block_size >= 2 and levels >= 0, "
                         f"got {tuple(ids_bt.shape)}, {tuple(query_end_b.shape)}, {r}, {block_size}, {levels}")
    eq, weight_br = _query_presence(ids_bt, query_end_b, r)
    present = eq.to(weight_br.dtype)  # [B, N_L, r]: is asked id j under node n (N_0 = T)
    out = []
    for level in range(levels + 1):
        if level:
            n = present.shape[1] // block_size
            present = present[:, : n * block_size].reshape(present.shape[0], n, block_size, -1).amax(2)
        value = torch.einsum("bnr,br->bn", present, weight_br)  # [B, N_L]
        top = value.amax(-1, keepdim=True) if value.shape[1] else value.new_zeros(value.shape[0], 1)
        out.append(torch.where(top > 0, value / top.clamp_min(1e-6), torch.zeros_like(value)))
    return out
