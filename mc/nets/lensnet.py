"""LensNet: a non-causal scorer over a materialised working context.

Owns the ``LensNet`` module only. For every entry of a (padded) working context it gives a
signed score in (-1, 1): positive asks the focus allocator for more detail (expand the gist into
its K children), negative for less (collapse K siblings into their parent).

Inputs (all tensors; the shapes are the static bucket shapes):
  embeds     [B, W, D]  entry embeddings (tokens and gists, base-model space)
  mask       [B, W]     bool, True = real entry, False = padding
  positions  [B, W]     float, span centre of each entry (start + (width - 1) / 2)
  lods       [B, W]     integer LOD of each entry
  num_tokens [B]        float, history length (tokens) the context covers
  match      [B, W]     float, only with ``cfg.token_index``: each entry's token-index match (mc.nets.token_index),
                        added to its logit with a learned gain

Per-entry features, computed inside from those tensors (no Python arithmetic on tensor values):
  lod / max_lod                                   (0 for tokens, 1 for the coarsest gists)
  width / num_tokens                              share of the history the entry covers,
                                                  width = K**lod computed as exp(lod * log K)
  (num_tokens - span_end) / num_tokens            distance from the end of the history, linear
  log1p(num_tokens - span_end) / log1p(num_tokens)  the same on a log scale (resolves the recent part)
  with span_end = position + (width + 1) / 2 (exclusive end), each clamped to [0, 1].
They pass through a small BidirectionalMLP and are added to the projected (RMS-normalised) embeddings; then
``cfg.n_layers`` bidirectional blocks with the key-padding mask, a norm and a linear head give the
logits; ``forward`` returns ``tanh(logits)``. With ``cfg.query_match`` a match term is added to every
logit: ``<q(h_last), k(h_i)> / sqrt(d)`` with ``h_last`` the final hidden state of the row's last real entry
(the index ``mask.sum(1) - 1`` is gathered as a tensor: no host read).

Padding: padded keys are masked out of attention and padded embeddings/features are zeroed
before use (so garbage or NaN in padding slots cannot leak through ``0 * NaN``); padded outputs
are exactly 0. Scores of real entries therefore do not depend on how much padding follows
(tests check 1e-5). A row with no real entry at all lets its (padded) queries attend to every
key instead of none, which keeps the softmax finite; its outputs are 0 like any padding.

Compile rules obeyed (obsidian "Design", rules for compiled code): constants (log K, 1/max_lod) are buffers made in
``__init__``; no Python state, ``.item()``, lists or data-dependent shapes in ``forward``; the
input checks read only shapes and dtypes, which are static under ``dynamic=False``.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from mc.nets.bidirectional import BidirectionalBlock, init_linear
from mc.nets.token_index import TokenIndex
from mc.config import LensNetConfig

NUM_FEATURES = 4  # lod, width share, linear distance from the end, log distance from the end


class LensNet(nn.Module):
    """[B, W] working-context entries -> scores [B, W] in (-1, 1) (see the module docstring)."""

    def __init__(self, cfg: LensNetConfig, embed_dim: int, block_size: int, max_lod: int) -> None:
        super().__init__()
        if embed_dim <= 0 or block_size < 2 or max_lod < 1:
            raise ValueError(
                f"LensNet needs embed_dim > 0, block_size >= 2 and max_lod >= 1, "
                f"got {embed_dim}, {block_size}, {max_lod}"
            )
        if cfg.d_model % cfg.n_heads:
            raise ValueError(f"lensnet.d_model ({cfg.d_model}) must be divisible by lensnet.n_heads ({cfg.n_heads})")
        d = cfg.d_model
        self.embed_dim = embed_dim
        self.block_size = block_size
        self.max_lod = max_lod
        # Constants as 0-d buffers (follow .to(device)); non-persistent: derived from the config.
        self.register_buffer("log_k", torch.tensor(math.log(block_size)), persistent=False)
        self.register_buffer("max_lod_t", torch.tensor(float(max_lod)), persistent=False)

        self.in_norm = nn.RMSNorm(embed_dim)
        self.in_proj = nn.Linear(embed_dim, d)
        self.feat_in = nn.Linear(NUM_FEATURES, d)
        self.feat_out = nn.Linear(d, d)
        for layer in (self.in_proj, self.feat_in, self.feat_out):
            init_linear(layer)
        self.blocks = nn.ModuleList(BidirectionalBlock(d, cfg.n_heads, cfg.n_layers) for _ in range(cfg.n_layers))
        self.out_norm = nn.RMSNorm(d)
        self.head = nn.Linear(d, 1)
        self.match_q = nn.Linear(d, d) if cfg.query_match else None
        self.match_k = nn.Linear(d, d) if cfg.query_match else None
        if cfg.query_match:
            init_linear(self.match_q)
            init_linear(self.match_k)
            self.register_buffer("match_scale", torch.tensor(1.0 / math.sqrt(d)), persistent=False)
        # The token index (cfg.token_index > 0): run by the controller outside this forward, its match comes in as
        # ``match`` and is added to the logits with a learned gain (mc.nets.token_index)
        self.index = TokenIndex(embed_dim, cfg.token_index, cfg.index_window, query=cfg.index_query) if cfg.token_index else None
        self.index_gain = nn.Parameter(torch.tensor(1.0)) if cfg.token_index else None
        # Small but non-zero: scores start near 0 (no edits asked for) while every parameter
        # still gets gradient from the first backward.
        init_linear(self.head)

    # ------------------------------------------------------------------ checks and features

    def _check(self, embeds: Tensor, mask: Tensor, positions: Tensor, lods: Tensor, num_tokens: Tensor) -> None:
        if embeds.dim() != 3 or embeds.shape[2] != self.embed_dim:
            raise ValueError(
                f"LensNet expects embeds of shape [B, W, D={self.embed_dim}], got {tuple(embeds.shape)}"
            )
        bw = tuple(embeds.shape[:2])
        for name, t in (("mask", mask), ("positions", positions), ("lods", lods)):
            if tuple(t.shape) != bw:
                raise ValueError(f"LensNet expects {name} of shape [B, W] = {bw} (like embeds), got {tuple(t.shape)}")
        if tuple(num_tokens.shape) != bw[:1]:
            raise ValueError(f"LensNet expects num_tokens of shape [B] = {bw[:1]}, got {tuple(num_tokens.shape)}")
        if mask.dtype != torch.bool:
            raise ValueError(f"LensNet mask must be bool (True = real entry), got dtype {mask.dtype}")
        if lods.is_floating_point() or lods.dtype == torch.bool:
            raise ValueError(f"LensNet lods must be an integer tensor, got dtype {lods.dtype}")
        if not positions.is_floating_point() or not embeds.is_floating_point():
            raise ValueError(
                f"LensNet positions and embeds must be floating point, got {positions.dtype} and {embeds.dtype}"
            )

    def features(self, mask: Tensor, positions: Tensor, lods: Tensor, num_tokens: Tensor) -> Tensor:
        """Per-entry features [B, W, NUM_FEATURES] in [0, 1]; 0 on padding."""
        dtype = positions.dtype
        lod_bw = lods.to(dtype).clamp(min=0.0)
        lod_bw = torch.minimum(lod_bw, self.max_lod_t.to(dtype))
        n_b1 = num_tokens.to(dtype).clamp(min=1.0).unsqueeze(1)  # [B, 1]; >= 1 avoids 0/0
        width_bw = torch.exp(lod_bw * self.log_k.to(dtype))  # K**lod tokens, as tensor ops
        span_end_bw = positions + 0.5 * (width_bw + 1.0)  # exclusive end of the span
        gap_bw = (n_b1 - span_end_bw).clamp(min=0.0)  # tokens after this entry
        feats_bwf = torch.stack(
            (
                lod_bw / self.max_lod_t.to(dtype),
                (width_bw / n_b1).clamp(0.0, 1.0),
                (gap_bw / n_b1).clamp(0.0, 1.0),
                (torch.log1p(gap_bw) / torch.log1p(n_b1)).clamp(0.0, 1.0),
            ),
            dim=-1,
        )
        return torch.where(mask.unsqueeze(-1), feats_bwf, torch.zeros_like(feats_bwf))

    # ------------------------------------------------------------------ forward

    def logits(self, embeds: Tensor, mask: Tensor, positions: Tensor, lods: Tensor, num_tokens: Tensor,
               match: Tensor | None = None) -> Tensor:
        """Pre-tanh logits [B, W]; exactly 0 at padded entries. ``match [B, W]``: the token index's value per entry
        (required when the net has an index, refused when it has none)."""
        self._check(embeds, mask, positions, lods, num_tokens)
        if (match is None) != (self.index is None) or (match is not None and match.shape != mask.shape):
            raise ValueError(f"LensNet {'with' if self.index is not None else 'without'} a token index got match="
                             f"{None if match is None else tuple(match.shape)}; it needs "
                             f"{'a [B, W] tensor like mask' if self.index is not None else 'None'}")
        mask_bw1 = mask.unsqueeze(-1)
        # Zero padded slots first: masked attention weights are 0, but 0 * NaN would still be NaN.
        embeds = torch.where(mask_bw1, embeds, torch.zeros_like(embeds))
        feats_bwf = self.features(mask, positions.to(embeds.dtype), lods, num_tokens)
        h_bwd = self.in_proj(self.in_norm(embeds))
        h_bwd = h_bwd + self.feat_out(torch.nn.functional.gelu(self.feat_in(feats_bwf)))
        # Rows with no real entry attend to everything (finite softmax); their outputs are 0 below.
        key_mask_bw = mask | ~mask.any(dim=1, keepdim=True)
        for block in self.blocks:
            h_bwd = block(h_bwd, key_mask=key_mask_bw)
        h_bwd = self.out_norm(h_bwd)
        logits_bw = self.head(h_bwd).squeeze(-1)  # [B, W]
        if self.match_q is not None:
            last_b = (mask.sum(dim=1) - 1).clamp(min=0)  # [B] index of the last real entry
            h_last_bd = h_bwd.gather(1, last_b.view(-1, 1, 1).expand(-1, 1, h_bwd.shape[2])).squeeze(1)
            q_bd = self.match_q(h_last_bd)
            logits_bw = logits_bw + torch.einsum("bd,bwd->bw", q_bd, self.match_k(h_bwd)) * self.match_scale
        if match is not None:
            logits_bw = logits_bw + self.index_gain * match.to(logits_bw.dtype)
        return torch.where(mask, logits_bw, torch.zeros_like(logits_bw))

    def forward(self, embeds: Tensor, mask: Tensor, positions: Tensor, lods: Tensor, num_tokens: Tensor,
                match: Tensor | None = None) -> Tensor:
        """Scores [B, W] = tanh(logits) in (-1, 1); exactly 0 at padded entries."""
        return torch.tanh(self.logits(embeds, mask, positions, lods, num_tokens, match))
