"""GistNet: compress K consecutive entries of one tree level into one gist vector.

Owns the ``GistNet`` module only. Input ``[N, K, D]`` (N blocks of K entries, each a vector in
the base model's embedding space, width D) -> output ``[N, D]`` in that same space, so a gist
can stand in a working context wherever its K children would have been.

Architecture (width ``cfg.d_model`` = d inside):
  in-projection D -> d, plus a learned position embedding over the K slots;
  ``cfg.n_layers`` bidirectional blocks (``mc.nets.bidirectional.BidirectionalBlock``, no mask: a block is always full);
  pooling, by ``cfg.pooling``:
    "mean_mlp": mean over the K slots, then a residual BidirectionalMLP;
    "query":    one learned query attends over the K slots (multi-head);
  RMSNorm, out-projection d -> D, and a residual of the plain mean of the *inputs*;
  with ``cfg.output_norm == "tokens"``, the result RMS-normalised and scaled to ``output_rms`` (a buffer the
  builder sets to the mean RMS of the base's token embeddings, :func:`token_embedding_rms`), so a gist enters
  the base at a token's scale.

With ``content_vocab > 0`` it also owns ``content_head`` (Linear D -> content_vocab), read only by stage 2's
content loss (:func:`mc.nets.losses.gist_content_loss`), never by ``forward``.

Init: the out-projection is tiny (std 1e-3, bias 0), so at step 0 the output is the mean of the
K inputs plus a perturbation of about 1e-3*sqrt(d) per element: a sensible gist from the first
step and never all-zero for non-zero input. It is deliberately not exactly zero: a zero
out-projection would multiply every upstream gradient by zero, and only the out-projection would
learn on the first step.

Compile rules obeyed (obsidian "Design", rules for compiled code): no Python state read or written in ``forward``, no
``.item()``, no lists, static shapes; the shape checks read only ``.shape``/``.dim()``, which
Dynamo treats as constants under ``dynamic=False``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mc.nets.bidirectional import BidirectionalMLP, BidirectionalAttention, BidirectionalBlock, init_linear
from mc.config import GIST_OUTPUT_NORMS, GIST_POOLINGS, GistNetConfig


class GistNet(nn.Module):
    """[N, K, D] blocks -> [N, D] gists (see the module docstring)."""

    def __init__(self, cfg: GistNetConfig, embed_dim: int, block_size: int, *, content_vocab: int = 0) -> None:
        super().__init__()
        if cfg.pooling not in GIST_POOLINGS:
            raise ValueError(f"gistnet.pooling={cfg.pooling!r} is not one of {GIST_POOLINGS}")
        if cfg.output_norm not in GIST_OUTPUT_NORMS:
            raise ValueError(f"gistnet.output_norm={cfg.output_norm!r} is not one of {GIST_OUTPUT_NORMS}")
        if embed_dim <= 0 or block_size < 2:
            raise ValueError(f"GistNet needs embed_dim > 0 and block_size >= 2, got {embed_dim}, {block_size}")
        if cfg.d_model % cfg.n_heads:
            raise ValueError(f"gistnet.d_model ({cfg.d_model}) must be divisible by gistnet.n_heads ({cfg.n_heads})")
        d = cfg.d_model
        self.embed_dim = embed_dim
        self.block_size = block_size
        self.pooling = cfg.pooling  # fixed at construction: a constant to Dynamo, never mutated
        self.token_scale = cfg.output_norm == "tokens"  # likewise
        # A tensor, not a float attribute: set after the base's weights are loaded, without a recompile. Not saved:
        # it follows the base the nets are built over (build_controller sets it), not the checkpoint.
        self.register_buffer("output_rms", torch.ones(()), persistent=False)

        self.in_proj = nn.Linear(embed_dim, d)
        init_linear(self.in_proj)
        self.slot_embed = nn.Parameter(torch.randn(block_size, d) * 0.02)  # [K, d]
        self.blocks = nn.ModuleList(BidirectionalBlock(d, cfg.n_heads, cfg.n_layers) for _ in range(cfg.n_layers))
        self.pool_norm = nn.RMSNorm(d)
        if cfg.pooling == "mean_mlp":
            self.pool_mlp = BidirectionalMLP(d)
            init_linear(self.pool_mlp.fc)
            init_linear(self.pool_mlp.proj)
        else:
            self.query = nn.Parameter(torch.randn(d) * 0.02)  # [d]: the one learned query
            self.pool_attn = BidirectionalAttention(d, cfg.n_heads)
            for layer in (self.pool_attn.q, self.pool_attn.kv, self.pool_attn.out):
                init_linear(layer)
        self.out_norm = nn.RMSNorm(d)
        self.out_proj = nn.Linear(d, embed_dim)
        # Tiny, not zero: output ~ mean of the inputs at init, yet gradient reaches every
        # upstream parameter from the first step (see the module docstring).
        nn.init.normal_(self.out_proj.weight, std=1e-3)
        nn.init.zeros_(self.out_proj.bias)
        # Training only (stage 2's content loss, mc.nets.losses.gist_content_loss): gist [D] -> which of
        # content_vocab tokens occur under it. Not part of forward; absent when the loss is off.
        self.content_head = nn.Linear(embed_dim, content_vocab) if content_vocab > 0 else None

    def _check(self, blocks: Tensor) -> None:
        if blocks.dim() != 3:
            raise ValueError(
                f"GistNet expects blocks of shape [N, K={self.block_size}, D={self.embed_dim}], "
                f"got a {blocks.dim()}-d tensor of shape {tuple(blocks.shape)}; reshape to [N, K, D]"
            )
        if blocks.shape[1] != self.block_size or blocks.shape[2] != self.embed_dim:
            raise ValueError(
                f"GistNet expects blocks of shape [N, K={self.block_size}, D={self.embed_dim}], "
                f"got {tuple(blocks.shape)}; each row must hold exactly block_size entries of width embed_dim"
            )
        if not blocks.is_floating_point():
            raise ValueError(f"GistNet expects floating-point embeddings, got dtype {blocks.dtype}")

    def forward(self, blocks: Tensor) -> Tensor:
        """blocks [N, K, D] -> gists [N, D]."""
        self._check(blocks)
        h_nkd = self.in_proj(blocks) + self.slot_embed  # [N, K, d]
        for block in self.blocks:
            h_nkd = block(h_nkd)
        if self.pooling == "mean_mlp":
            pooled_nd = h_nkd.mean(dim=1)  # [N, d]
            pooled_nd = pooled_nd + self.pool_mlp(self.pool_norm(pooled_nd))
        else:
            n, _, d = h_nkd.shape
            query_n1d = self.query.view(1, 1, d).expand(n, 1, d)  # [N, 1, d]
            pooled_nd = self.pool_attn(query_n1d, self.pool_norm(h_nkd)).squeeze(1)  # [N, d]
        # Residual of the plain mean: the gist starts as mean pooling and learns a correction.
        gist_nd = blocks.mean(dim=1) + self.out_proj(self.out_norm(pooled_nd))  # [N, D]
        if self.token_scale:
            gist_nd = F.rms_norm(gist_nd, (self.embed_dim,)) * self.output_rms
        return gist_nd

    def set_output_rms(self, rms: float) -> None:
        """The RMS every gist is scaled to under ``output_norm: tokens`` (see :func:`token_embedding_rms`)."""
        if not 0 < rms < float("inf"):  # NaN fails both comparisons
            raise ValueError(f"GistNet output RMS must be a finite number > 0, got {rms!r}")
        self.output_rms.fill_(float(rms))


@torch.no_grad()
def token_embedding_rms(tok_emb: nn.Embedding) -> float:
    """Mean over the vocabulary of each token embedding's RMS: the scale a gist takes under ``output_norm: tokens``."""
    w = tok_emb.weight
    return float(torch.cat([rows.float().pow(2).mean(-1).sqrt() for rows in w.split(8192)]).mean())
