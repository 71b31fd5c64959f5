"""LensNet's token index: a learned match of every history token against what the reader asks for now.

Owns :class:`TokenIndex` (per-token keys and a pooled query), the span maximum that turns token matches into one
value per tree node (:func:`span_max_levels`), and the two places that value is built: a training micro-step
(:func:`training_match`, every variant of the batch in one gather) and an inference session
(:func:`session_match`, keys cached across refocuses by :class:`SessionKeys`).

Why: LensNet reads gists, and a 512-token gist keeps a record's key only weakly (a linear probe read its first
letter at 22%, chance 4%), so on a haystack of real text its own zoom opened the queried one of four records about
as often as a random pick would. The history's tokens are stored anyway. The index reads them the way sparse
attention's indexers do: a key per token from a short window of token embeddings (a causal convolution: "AB="
is a different window from "AB" in a sentence), one query pooled over the recent tail by learned attention (the
tail holds the question, e.g. ``AB=``; in training, the windows before the answer: see :func:`training_match`), and
a node's match is the maximum of ``<q, k_t> / sqrt(d)`` (a cosine for ``twin``) over the tokens under it. The match is added to LensNet's
logit with a learned gain, inside the compiled call (``match`` input), and is trained by LensNet's own losses and,
when weighted, :func:`mc.nets.losses.index_locate_loss`. Obsidian LensNet, "Token index".

``index_query = "lexical"`` replaces the learned keys and query with exact token identity
(:mod:`mc.nets.lexical_match`): the index then has no parameters, only LensNet's gain weighs its match.
``"overlap"`` does too, with a node's value the sum over the distinct asked ids under it rather than a maximum.

Cost: keys are ``O(tokens * window * D * d)`` once per token (a session caches them; a rollback is caught by
comparing token ids), the query and the match ``O(tokens * d)`` per scoring.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mc.config_choices import INDEX_QUERIES
from mc.nets.bidirectional import init_linear
from mc.nets.lexical_match import lexical_token_match, overlap_levels
from mc.nets.losses import entry_spans


class TokenIndex(nn.Module):
    """Token embeddings ``[B, T, D]`` -> per-token keys ``[B, T, d]``; tail features -> one query ``[B, d]``."""

    def __init__(self, embed_dim: int, dim: int, window: int, *, query: str = "pooled") -> None:
        super().__init__()
        if dim <= 0 or window < 1 or query not in INDEX_QUERIES:
            raise ValueError(f"TokenIndex needs dim > 0, window >= 1 and query in {INDEX_QUERIES}, got {dim}, {window}, "
                             f"{query!r}")
        self.window, self.dim = window, dim
        # "lexical": exact token identity with the question (mc.nets.lexical_match), nothing learned here: LensNet's
        # gain on the match is the only weight, so the index has no parameters and its loss does not apply.
        # "overlap": the same evidence per node, a sum over the distinct asked ids under it (mc.nets.lexical_match).
        self.lexical = query in ("lexical", "overlap")
        self.overlap = query == "overlap"
        self.twin = query == "twin"
        if self.lexical:
            return
        self.norm = nn.RMSNorm(embed_dim)
        self.conv = nn.Conv1d(embed_dim, dim, window)  # a window of embeddings ending at each token
        self.key = nn.Linear(dim, dim)
        # "twin": the query is the pooled windows under the keys' own projection, the pool starts on the newest
        # window (a learned slope over the tail, weights ~ e^(slope * (r - R + 1)), slope 3 at init) and the match is
        # a cosine, so it starts as a similarity of windows: the question's "\nAB=" finds the record's twin "\nAB="
        # before any training. The index loss reads the cosine times a learned temperature (10 at init); LensNet the
        # cosine itself (times its gain): a sharp softmax over tokens would push LensNet's logits into tanh's flat
        # ends (a first version gave both the temperature, which grew to 32). "pooled" (the first design) learns its
        # own query projection and pool from uniform and matches by a scaled dot product (obsidian LensNet).
        twin = self.twin
        self.query = None if twin else nn.Linear(dim, dim)
        self.recency = nn.Parameter(torch.tensor(3.0)) if twin else None
        self.log_temperature = nn.Parameter(torch.tensor(math.log(10.0))) if twin else None
        self.pool = nn.Linear(dim, 1)
        for layer in (self.key, self.query, self.pool):
            if layer is not None:
                init_linear(layer)
        self.scale = 1.0 / math.sqrt(dim)

    def features(self, embeds_btd: Tensor, *, left: Tensor | None = None) -> Tensor:
        """``[B, T, d]``: the window ending at each token. ``left [B, window - 1, D]`` is what precedes the first
        token (zeros when None: the start of the history)."""
        b, _, d = embeds_btd.shape
        if left is None:
            left = embeds_btd.new_zeros(b, self.window - 1, d)
        x = self.norm(torch.cat([left, embeds_btd], dim=1)).transpose(1, 2)  # [B, D, window - 1 + T]
        return F.gelu(self.conv(x)).transpose(1, 2)

    def keys(self, feats_btd: Tensor) -> Tensor:
        return self.key(feats_btd)

    def pooled_query(self, tail_feats_brd: Tensor) -> Tensor:
        """``[B, d]``: the tail's windows pooled by learned attention, then projected."""
        logits = self.pool(tail_feats_brd).squeeze(-1)  # [B, R]
        if self.twin:
            r = tail_feats_brd.shape[1]
            logits = logits + self.recency * torch.arange(1 - r, 1, device=logits.device, dtype=logits.dtype)
        weights = torch.softmax(logits, dim=-1)
        return (self.key if self.twin else self.query)(torch.einsum("br,brd->bd", weights, tail_feats_brd))

    def match(self, keys_btd: Tensor, query_bd: Tensor) -> Tensor:
        """``[B, T]``: each token's key against the query."""
        if not self.twin:
            return torch.einsum("btd,bd->bt", keys_btd, query_bd) * self.scale
        return torch.einsum("btd,bd->bt", F.normalize(keys_btd, dim=-1), F.normalize(query_bd, dim=-1))

    def loss_logits(self, match_bt: Tensor) -> Tensor:
        """What :func:`mc.nets.losses.index_locate_loss` reads: a twin's cosine times its temperature."""
        return match_bt * self.log_temperature.exp() if self.twin else match_bt


def match_args(index: TokenIndex | None, positions: Tensor, match: Tensor | None) -> tuple:
    """LensNet's extra call argument: none without an index (the call, and its compiled graph, as before the index
    existed); with one, ``match`` or zeros shaped like ``positions`` (warm-up, the harness and benches call without
    a history; the same input keeps the same graph)."""
    if index is None:
        return ()
    return (torch.zeros_like(positions) if match is None else match,)


def span_max_levels(match_bt: Tensor, block_size: int, levels: int) -> list[Tensor]:
    """Level 0 is ``match_bt``; level L ``[B, T // K**L]`` the maximum over each node's K children (complete
    nodes only, as the tree builds them)."""
    out = [match_bt]
    for _ in range(levels):
        prev = out[-1]
        n = prev.shape[1] // block_size
        out.append(prev[:, : n * block_size].reshape(prev.shape[0], n, block_size).amax(dim=-1))
    return out


def training_match(index: TokenIndex, embeds_btd: Tensor, plan_index_rw: Tensor, query_end_b: Tensor,
                   mc, ids_bt: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """``[R, W]`` match of every entry of a micro-step's variants, and ``[B, T]`` each token's as the index loss
    reads it (:meth:`TokenIndex.loss_logits`). ``plan_index_rw`` is the step plan's row of the flat level
    table (:mod:`mc.gather`: level 0's ``B*T`` rows, then level 1's, ..., then one padding row); ``mc`` the
    :class:`mc.config.MCConfig`.

    The query pools the ``mc.recent_tokens`` windows that end before ``query_end_b [B]`` (the step plan's: a recall
    row's answer start, else ``T``). Why not the tail's last windows: a session refocuses when the question has been
    read and the answer not yet written, while a training row's tail ends with the answer. Trained with the index
    loss, a query that saw the answer learned to match the record's value (its last window, 0.997 of the pool's
    weight, found the queried one of four records in 24 of 24 documents with the answer in view, 3 of 24 without)."""
    r = mc.recent_tokens
    if index.lexical:  # ids [B, T]: the same query window, exact token identity (mc.nets.lexical_match)
        if ids_bt is None:
            raise ValueError("training_match: the lexical token index reads token ids: pass ids_bt [B, T]")
        if index.overlap:  # node values of every level directly: a sum over distinct ids is no max of its tokens'
            levels = overlap_levels(ids_bt, query_end_b, r, mc.block_size, mc.max_lod)
            flat = torch.cat([lv.reshape(-1) for lv in levels] + [levels[0].new_zeros(1)])
            return flat[plan_index_rw], levels[0]
        match_bt = loss_bt = lexical_token_match(ids_bt, query_end_b, r)
    else:
        feats = index.features(embeds_btd)  # [B, T, d]
        at = (query_end_b.view(-1, 1) - r + torch.arange(r, device=feats.device)).clamp(min=0)  # [B, r]
        query = index.pooled_query(feats.gather(1, at.unsqueeze(-1).expand(-1, -1, feats.shape[-1])))
        match_bt = index.match(index.keys(feats), query)
        loss_bt = index.loss_logits(match_bt)
    levels = span_max_levels(match_bt, mc.block_size, mc.max_lod)
    flat = torch.cat([lv.reshape(-1) for lv in levels] + [levels[0].new_zeros(1)])
    return flat[plan_index_rw], loss_bt


class SessionKeys:
    """A session's token windows and keys, computed once per token. The token ids they were made from are kept, so
    after a rollback to an earlier state (a snapshot's restore, a lookahead's revert, a failed append) the ones past
    the first changed token are made again instead of trusted."""

    def __init__(self) -> None:
        self.ids = torch.zeros(0, dtype=torch.long)
        self.feats: Tensor | None = None  # [n, d] the window ending at each token (the query pools the tail's)
        self.keys: Tensor | None = None  # [n, d]
        # The flat table of the last match (every tree node's best token match) and what it was made from: a refocus
        # scores one unchanged history many times (each allocator iteration of each zoom path), and at 256x the
        # window the match over every token was ~1/7 of a sweep document's time.
        self.table: tuple[tuple, Tensor, Tensor] | None = None  # (key, flat [sum of level sizes], offsets [L + 1])

    @torch.no_grad()
    def update(self, index: TokenIndex, ids: Tensor, embeds_nd: Tensor) -> tuple[Tensor, Tensor]:
        """Windows and keys ``[N, d]`` of the history ``ids [N]`` with token embeddings ``embeds_nd [N, D]``."""
        n, have = ids.shape[0], min(self.ids.shape[0], ids.shape[0])
        same = self.ids[:have].to(ids.device) == ids[:have]
        keep = have if bool(same.all()) else int((~same).to(torch.int8).argmax())
        if index.lexical:  # no windows or keys: the ids are the whole state
            if keep < n or n < self.ids.shape[0]:
                self.ids, self.table = ids.clone(), None
            return None, None
        if self.feats is None or keep < n:
            w = index.window - 1
            left = embeds_nd[max(0, keep - w):keep]  # what precedes the first new token, zeros before the history
            left = torch.cat([left.new_zeros(w - left.shape[0], left.shape[1]), left])
            feats = index.features(embeds_nd[None, keep:], left=left[None])[0]
            keys = index.keys(feats)
            self.feats = feats if self.feats is None else torch.cat([self.feats[:keep], feats])
            self.keys = keys if self.keys is None else torch.cat([self.keys[:keep], keys])
            self.ids = ids.clone()
            self.table = None  # made from tokens that are no longer the history's
        return self.feats[:n], self.keys[:n]

    @torch.no_grad()
    def match_table(self, index: TokenIndex, n: int, *, block_size: int, max_lod: int, recent_tokens: int
                    ) -> tuple[Tensor, Tensor]:
        """The match of the first ``n`` tokens (after :meth:`update` with that history) with the query pooled from
        their last ``recent_tokens`` windows, as one flat table of every level's node maxima and each level's first
        row: made once per history, reused until :meth:`update` sees another."""
        key = (n, block_size, max_lod, recent_tokens)
        if self.table is None or self.table[0] != key:
            ids, end = self.ids[None, :n], torch.full((1,), n, dtype=torch.long, device=self.ids.device)
            if index.overlap:
                levels = overlap_levels(ids, end, recent_tokens, block_size, max_lod)
            elif index.lexical:
                levels = span_max_levels(lexical_token_match(ids, end, recent_tokens), block_size, max_lod)
            else:
                feats, keys = self.feats[:n], self.keys[:n]
                query = index.pooled_query(feats[None, -recent_tokens:])[0]
                levels = span_max_levels(index.match(keys[None], query[None]), block_size, max_lod)
            sizes = torch.tensor([lv.shape[1] for lv in levels], device=levels[0].device)
            self.table = (key, torch.cat([lv[0] for lv in levels]), torch.cumsum(sizes, 0) - sizes)
        return self.table[1], self.table[2]


@torch.no_grad()
def session_match(index: TokenIndex, session, mwc, *, block_size: int, recent_tokens: int) -> Tensor:
    """``[bucket]`` match of ``mwc``'s entries (a materialised working context of ``session``, an
    :class:`mc.session.InferenceSession`), 0 on padding."""
    history = session.history()
    session.index_keys.update(index, history, session.tree.level(0))
    max_lod = session.wc.max_lod  # host state: no read of mwc.lods
    flat, offsets = session.index_keys.match_table(index, history.shape[0], block_size=block_size, max_lod=max_lod,
                                                   recent_tokens=recent_tokens)  # offsets [L + 1]: each level's first row
    lods = mwc.lods.clamp(0, max_lod)
    start, width = entry_spans(mwc.positions, lods, block_size)
    at = (offsets[lods] + start // width).clamp(0, flat.shape[0] - 1)  # padding (lod 0, position 0) reads row 0
    return torch.where(mwc.mask, flat[at], torch.zeros_like(flat[at]))
