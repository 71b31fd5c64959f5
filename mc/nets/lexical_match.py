"""The token index's ``lexical`` query: each history token's exact match with the tokens of what is asked now.

Owns :func:`lexical_token_match`, the per-token value LensNet's token index hands on (a node's match is the maximum
over the tokens under it, :func:`mc.nets.token_index.span_max_levels`) when ``lensnet.index_query = "lexical"``.

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
