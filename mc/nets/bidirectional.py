"""A small non-causal (bidirectional) transformer block shared by GistNet and LensNet.

Owns: ``BidirectionalAttention`` (multi-head attention through ``F.scaled_dot_product_attention`` with an
optional boolean key mask, and an optional separate query input for learned-query pooling),
``BidirectionalMLP``, ``BidirectionalBlock`` (pre-norm residual block) and ``init_linear`` (the weight init both nets use).

Everything here is compile-friendly (obsidian "Design", rules for compiled code): no Python state is read or written in
``forward``, shapes come only from the inputs, and the key mask is a tensor (never a length).
"""
from __future__ import annotations

import math

import torch.nn.functional as F
from torch import Tensor, nn


def init_linear(layer: nn.Linear, std: float = 0.02) -> None:
    """Normal(0, std) weights and zero bias: the usual small-transformer init."""
    nn.init.normal_(layer.weight, mean=0.0, std=std)
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)


class BidirectionalAttention(nn.Module):
    """Multi-head attention, non-causal; ``key_mask`` [B, Wk] bool (True = may be attended to).

    ``forward(x_q, x_kv=None, key_mask=None)``: x_q [B, Wq, d], x_kv [B, Wk, d] (defaults to
    x_q, i.e. self-attention) -> [B, Wq, d]. A row whose key mask is all False would give NaN
    from the softmax; callers that can produce such rows must pass a mask with at least one True
    per row (LensNet does, see ``LensNet.logits``).
    """

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.q = nn.Linear(d_model, d_model)
        self.kv = nn.Linear(d_model, 2 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x_q: Tensor, x_kv: Tensor | None = None, key_mask: Tensor | None = None) -> Tensor:
        if x_kv is None:
            x_kv = x_q
        b, wq, d = x_q.shape
        wk = x_kv.shape[1]
        q_bhqd = self.q(x_q).view(b, wq, self.n_heads, self.head_dim).transpose(1, 2)
        k_bwd, v_bwd = self.kv(x_kv).chunk(2, dim=-1)
        k_bhkd = k_bwd.reshape(b, wk, self.n_heads, self.head_dim).transpose(1, 2)
        v_bhkd = v_bwd.reshape(b, wk, self.n_heads, self.head_dim).transpose(1, 2)
        attn_mask = None
        if key_mask is not None:
            # [B, Wk] -> [B, 1, 1, Wk]: broadcast over heads and queries; True = attend.
            attn_mask = key_mask[:, None, None, :]
        y_bhqd = F.scaled_dot_product_attention(q_bhqd, k_bhkd, v_bhkd, attn_mask=attn_mask)
        y_bqd = y_bhqd.transpose(1, 2).reshape(b, wq, d)
        return self.out(y_bqd)


class BidirectionalMLP(nn.Module):
    """Two-layer GELU BidirectionalMLP with a 4x hidden width."""

    def __init__(self, d_model: int, d_out: int | None = None, hidden_mult: int = 4) -> None:
        super().__init__()
        self.fc = nn.Linear(d_model, hidden_mult * d_model)
        self.proj = nn.Linear(hidden_mult * d_model, d_out if d_out is not None else d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(F.gelu(self.fc(x)))


class BidirectionalBlock(nn.Module):
    """Pre-norm residual block: x + attn(norm(x)), then + mlp(norm(x)). Non-causal."""

    def __init__(self, d_model: int, n_heads: int, n_layers_total: int = 1) -> None:
        super().__init__()
        self.norm_attn = nn.RMSNorm(d_model)
        self.attn = BidirectionalAttention(d_model, n_heads)
        self.norm_mlp = nn.RMSNorm(d_model)
        self.mlp = BidirectionalMLP(d_model)
        for layer in (self.attn.q, self.attn.kv, self.mlp.fc):
            init_linear(layer)
        # Residual-branch outputs are scaled down with depth (GPT-2 style) so that the residual
        # stream keeps its scale at init however many blocks are stacked.
        residual_std = 0.02 / math.sqrt(2 * max(1, n_layers_total))
        init_linear(self.attn.out, residual_std)
        init_linear(self.mlp.proj, residual_std)

    def forward(self, x_bwd: Tensor, key_mask: Tensor | None = None) -> Tensor:
        x_bwd = x_bwd + self.attn(self.norm_attn(x_bwd), key_mask=key_mask)
        return x_bwd + self.mlp(self.norm_mlp(x_bwd))
