"""The base language model: a small decoder-only GPT, and the next-token loss.

Owns: :class:`GPT` (token embedding, pre-norm blocks of RMSNorm + rotary self-attention
(+ optional QK-norm) + CausalMLP, final RMSNorm, untied LM head) and :func:`next_token_loss`.

Two input paths (see ``GPT.forward``):

* **token ids** ``[B, T]``: embed them and use plain rotary positions ``0..T-1`` (stage-1
  pretraining, and any plain LOD0 run);
* **embeddings** ``[B, W, D]`` with caller-given ``cos, sin [B, W, hd/2]`` (from
  :func:`mc.nets.positional.lod_rotary_cos_sin`) and a ``key_padding_mask [B, W]`` (True = real entry):
  the working-context path, where entries are token embeddings or GistNet gists.

CausalAttention is causal plus key padding. Every position may always attend to itself, so a padding
query row is never fully masked (which would make softmax produce NaN); padding rows' outputs
are garbage-but-finite and must be ignored by the caller (the loss mask does that).

The LM head is **untied** from the token embedding: gists are trained to live in the input
embedding space, and tying would make that space double as the output classifier, so the two
jobs would pull on the same matrix. Untied costs ``V * D`` parameters, which is small for the
byte vocabulary.

``forward`` mutates no Python state and calls no ``.item()``; the plain-rotary table for
``model.max_seq_len`` positions is a buffer built in ``__init__``.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mc.config import ModelConfig
from mc.nets.gpt_cached import forward_cached
from mc.nets.positional import apply_rotary, rotary_cos_sin

__all__ = ["GPT", "at_positions", "next_token_loss", "RMSNorm"]

_INIT_STD = 0.02  # GPT-2 style base std for embeddings and projections


class RMSNorm(nn.Module):
    """Root-mean-square norm over the last dim with a learned gain (no bias, no mean-centring)."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class CausalAttention(nn.Module):
    """Multi-head self-attention with rotary positions, optional per-head QK RMSNorm, SDPA."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.head_dim = cfg.d_model // cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        # QK-norm keeps attention logits bounded (stabler training at larger lr); applied
        # before the rotation so it does not interact with the LOD damping of cos/sin.
        self.q_norm = RMSNorm(self.head_dim) if cfg.qk_norm else nn.Identity()
        self.k_norm = RMSNorm(self.head_dim) if cfg.qk_norm else nn.Identity()

    def forward(self, x_bwd: Tensor, cos: Tensor, sin: Tensor, attn_mask_b1ww: Tensor | None) -> Tensor:
        b, w, d = x_bwd.shape
        qkv = self.qkv(x_bwd).view(b, w, 3, self.n_heads, self.head_dim)
        q_bhwh, k_bhwh, v_bhwh = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each [B, H, W, hd]
        q_bhwh = apply_rotary(self.q_norm(q_bhwh), cos, sin)
        k_bhwh = apply_rotary(self.k_norm(k_bhwh), cos, sin)
        if attn_mask_b1ww is None:  # no padding: let SDPA pick a fused causal kernel
            y = F.scaled_dot_product_attention(q_bhwh, k_bhwh, v_bhwh, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q_bhwh, k_bhwh, v_bhwh, attn_mask=attn_mask_b1ww)
        return self.proj(y.transpose(1, 2).reshape(b, w, d))


class CausalMLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model, bias=False)
        self.proj = nn.Linear(4 * cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(F.gelu(self.fc(x)))


class CausalBlock(nn.Module):
    """Pre-norm residual block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.norm1 = RMSNorm(cfg.d_model)
        self.attn = CausalAttention(cfg)
        self.norm2 = RMSNorm(cfg.d_model)
        self.mlp = CausalMLP(cfg)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, attn_mask: Tensor | None) -> Tensor:
        x = x + self.attn(self.norm1(x), cos, sin, attn_mask)
        return x + self.mlp(self.norm2(x))


def _validate_model_config(cfg: ModelConfig) -> None:
    for k in ("vocab_size", "d_model", "n_layers", "n_heads", "max_seq_len"):
        v = getattr(cfg, k)
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise ValueError(f"ModelConfig.{k}={v!r} must be a positive integer")
    if cfg.d_model % cfg.n_heads or (cfg.d_model // cfg.n_heads) % 2:
        raise ValueError(f"ModelConfig.d_model={cfg.d_model} / n_heads={cfg.n_heads} must be an even integer "
                         "(rotary rotates channel pairs); change n_heads or d_model")


class GPT(nn.Module):
    """Decoder-only transformer over token ids or over a given embedding sequence."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        _validate_model_config(cfg)
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(CausalBlock(cfg) for _ in range(cfg.n_layers))
        self.norm_f = RMSNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        # Plain rotary table for the token-ids path, positions 0..max_seq_len-1. Not persistent:
        # it is a pure function of the config, so checkpoints need not carry it.
        cos, sin = rotary_cos_sin(torch.arange(cfg.max_seq_len), self.head_dim, cfg.rope_base)
        self.register_buffer("rope_cos", cos, persistent=False)  # [max_seq_len, hd/2]
        self.register_buffer("rope_sin", sin, persistent=False)
        self._init_weights()

    @property
    def head_dim(self) -> int:
        return self.cfg.d_model // self.cfg.n_heads

    @property
    def kv_heads(self) -> int:
        """Key/value heads per layer (= query heads: no grouped-query attention): the KV cache's H."""
        return self.cfg.n_heads

    def _init_weights(self) -> None:
        # Small normal init; the two residual-branch output projections per block are scaled by
        # 1/sqrt(2 * n_layers) so the residual stream's variance does not grow with depth.
        resid_std = _INIT_STD / math.sqrt(2 * self.cfg.n_layers)
        for name, p in self.named_parameters():
            if name.endswith("attn.proj.weight") or name.endswith("mlp.proj.weight"):
                nn.init.normal_(p, mean=0.0, std=resid_std)
            elif p.dim() >= 2:  # embedding, qkv, fc, lm_head
                nn.init.normal_(p, mean=0.0, std=_INIT_STD)
            # 1-d params are RMSNorm gains, already ones

    def embed(self, token_ids: Tensor) -> Tensor:
        """Token ids ``[B, T]`` (integer) -> embeddings ``[B, T, D]`` (the LOD0 embedding space)."""
        if not isinstance(token_ids, Tensor) or token_ids.dtype.is_floating_point or token_ids.dtype == torch.bool:
            raise ValueError("token_ids must be an integer tensor of token ids")
        return self.tok_emb(token_ids)

    def _plain_cos_sin(self, w: int, device) -> tuple[Tensor, Tensor]:
        if w <= self.rope_cos.shape[0]:
            return self.rope_cos[:w], self.rope_sin[:w]  # [W, hd/2]
        # Longer than the table (e.g. a full-history baseline): compute, same function, same values.
        return rotary_cos_sin(torch.arange(w, device=device), self.head_dim, self.cfg.rope_base)

    def forward(self, token_ids: Tensor | None = None, *, embeds: Tensor | None = None,
                cos: Tensor | None = None, sin: Tensor | None = None,
                key_padding_mask: Tensor | None = None, logit_index: Tensor | None = None) -> Tensor:
        """Logits ``[B, W, V]`` for every position (``[B, Q, V]`` at ``logit_index [B, Q]`` when given).

        Give exactly one of ``token_ids [B, T]`` or ``embeds [B, W, D]``.
        ``cos, sin``: ``[B, W, hd/2]`` or ``[W, hd/2]``; both or neither. When neither is given,
        plain rotary positions ``0..W-1`` are used (the token-ids path always does this if none
        are given). ``key_padding_mask [B, W]`` bool, True = real entry; padded entries are never
        attended to by other positions, and their own logits are meaningless (finite). ``logit_index``
        (long) picks the positions the final norm and LM head run on: training reads only the tail's.
        """
        if (token_ids is None) == (embeds is None):
            raise ValueError("GPT.forward needs exactly one of token_ids [B, T] or embeds [B, W, D]")
        if token_ids is not None:
            if token_ids.dim() != 2:
                raise ValueError(f"token_ids must be [B, T], got shape {tuple(token_ids.shape)}")
            x_bwd = self.embed(token_ids)
        else:
            if embeds.dim() != 3 or embeds.shape[-1] != self.cfg.d_model:
                raise ValueError(f"embeds must be [B, W, D={self.cfg.d_model}], got shape {tuple(embeds.shape)}")
            x_bwd = embeds
        b, w, _ = x_bwd.shape

        if (cos is None) != (sin is None):
            raise ValueError("give both cos and sin, or neither (plain rotary positions 0..W-1)")
        if cos is None:
            cos, sin = self._plain_cos_sin(w, x_bwd.device)
        else:
            half = self.head_dim // 2
            ok = tuple(cos.shape) in ((b, w, half), (1, w, half), (w, half))
            if not ok or cos.shape != sin.shape:
                raise ValueError(f"cos/sin must be [B={b}, W={w}, {half}] or [W={w}, {half}] "
                                 f"(head_dim/2), got {tuple(cos.shape)} and {tuple(sin.shape)}")

        attn_mask_b1ww = None
        if key_padding_mask is not None:
            if key_padding_mask.dtype != torch.bool or tuple(key_padding_mask.shape) != (b, w):
                raise ValueError(f"key_padding_mask must be a bool tensor [B={b}, W={w}] (True = real), "
                                 f"got {key_padding_mask.dtype} {tuple(key_padding_mask.shape)}")
            attn_mask_b1ww = self._attention_mask(key_padding_mask)

        for block in self.blocks:
            x_bwd = block(x_bwd, cos, sin, attn_mask_b1ww)
        return self.lm_head(self.norm_f(at_positions(x_bwd, logit_index)))  # [B, W, V] or [B, Q, V]

    def forward_cached(self, embeds_1sd: Tensor, cos: Tensor, sin: Tensor, k_cache: Tensor, v_cache: Tensor,
                       slots_s: Tensor, window: int, masked: bool = True) -> Tensor:
        """Logits ``[1, V]`` of the last of ``S`` new entries, reusing cached keys/values of earlier entries.

        ``embeds_1sd [1, S, D]`` are working-context entries at cache slots ``slots_s [S]`` (consecutive,
        ascending); ``cos, sin [S, hd]`` the full-width rotary tables of
        :func:`mc.nets.positional.rotary_full` (built once, not per layer); ``k_cache, v_cache [L, 1, H, C, hd]`` hold every earlier
        slot's keys/values and receive the new ones in place. Attention reads the first ``window``
        slots (a static int: one compiled graph per bucket), causally by slot. Entry ``i`` then sees
        exactly what :meth:`forward` over the whole working context shows it, so the logits match
        (see obsidian Inference). No ``.item()`` and no Python state: the S=1 call is the compiled
        decode step. ``masked=False`` (eager one-entry steps: ``S == 1`` at slot ``window - 1``) skips
        the mask, which would allow every key anyway: the same attention, fewer ops. The ops are in
        :mod:`mc.nets.gpt_cached` (one flat function: the eager step is bound by per-call overhead).
        """
        return forward_cached(self, embeds_1sd, cos, sin, k_cache, v_cache, slots_s, window, masked)

    @staticmethod
    def _attention_mask(key_padding_mask_bw: Tensor) -> Tensor:
        """Boolean SDPA mask ``[B, 1, W, W]``, True = may attend: causal AND real key, OR self."""
        w = key_padding_mask_bw.shape[1]
        idx = torch.arange(w, device=key_padding_mask_bw.device)
        causal_ww = idx[None, :] <= idx[:, None]  # key j <= query i
        self_ww = idx[None, :] == idx[:, None]  # the diagonal keeps padding rows from being all-False
        allowed = (causal_ww[None] & key_padding_mask_bw[:, None, :]) | self_ww[None]  # [B, W, W]
        return allowed[:, None]


def at_positions(x_bwd: Tensor, index_bq: Tensor | None) -> Tensor:
    """``x_bwd [B, W, D]`` at positions ``index_bq [B, Q]`` -> ``[B, Q, D]`` (``x_bwd`` itself when None)."""
    if index_bq is None:
        return x_bwd
    b = x_bwd.shape[0]
    if index_bq.dim() != 2 or index_bq.shape[0] != b or index_bq.dtype != torch.long:
        raise ValueError(f"logit_index must be a long tensor [B={b}, Q], got {index_bq.dtype} {tuple(index_bq.shape)}")
    return x_bwd.gather(1, index_bq.unsqueeze(-1).expand(-1, -1, x_bwd.shape[-1]))


def next_token_loss(logits: Tensor, targets: Tensor, loss_mask: Tensor | None = None,
                    reduction: str = "mean") -> Tensor:
    """Next-token cross-entropy with the one-position shift done here.

    logits ``[B, W, V]``, targets ``[B, W]`` (the token at each position), loss_mask ``[B, W]``
    bool or None (= all True).

    **Mask convention (indexed by the target):** ``loss_mask[:, j]`` True means "the token at
    position j is predicted", i.e. the pair (``logits[:, j-1]``, ``targets[:, j]``) is scored.
    ``loss_mask[:, 0]`` is ignored (nothing precedes position 0). A caller that wants "gist
    positions predict nothing" sets ``loss_mask[:, j]`` False whenever entry ``j-1`` is a gist
    or padding (and whenever entry j is not a real token). Masked pairs contribute nothing: their
    targets may hold any value (they are replaced before the cross-entropy) and their losses are
    selected away, not multiplied, so a non-finite masked logit cannot leak into the result.

    reduction:
      * ``"mean"``: scalar mean over all unmasked pairs (0 when there are none);
      * ``"none"``: ``[B, W-1]``, element i = loss of ``logits[:, i]`` predicting
        ``targets[:, i+1]``, 0 where masked;
      * ``"per_row"``: ``[B]``, mean over each row's unmasked pairs (0 for a row with none).
    The loss is computed in float32 whatever the logits dtype.
    """
    if logits.dim() != 3:
        raise ValueError(f"logits must be [B, W, V], got shape {tuple(logits.shape)}")
    b, w, v = logits.shape
    if w < 2:
        raise ValueError(f"next_token_loss needs W >= 2 positions to form a (prediction, target) pair, got W={w}")
    if tuple(targets.shape) != (b, w) or targets.dtype.is_floating_point or targets.dtype == torch.bool:
        raise ValueError(f"targets must be an integer tensor [B={b}, W={w}], got {targets.dtype} {tuple(targets.shape)}")
    if loss_mask is None:
        loss_mask = torch.ones(b, w, dtype=torch.bool, device=logits.device)
    elif loss_mask.dtype != torch.bool or tuple(loss_mask.shape) != (b, w):
        raise ValueError(f"loss_mask must be a bool tensor [B={b}, W={w}], got {loss_mask.dtype} {tuple(loss_mask.shape)}")
    if reduction not in ("mean", "none", "per_row"):
        raise ValueError(f"reduction={reduction!r}: expected 'mean', 'none' or 'per_row'")

    pred_logits = logits[:, :-1].float()  # [B, W-1, V]: position i predicts ...
    tgt = targets[:, 1:]  # [B, W-1]: ... the token at i+1
    mask = loss_mask[:, 1:]  # [B, W-1], indexed by the target
    safe_tgt = torch.where(mask, tgt, torch.zeros_like(tgt))  # masked targets may be out of range
    nll = F.cross_entropy(pred_logits.reshape(-1, v), safe_tgt.reshape(-1).long(), reduction="none").view(b, w - 1)
    nll = torch.where(mask, nll, torch.zeros_like(nll))  # [B, W-1]
    if reduction == "none":
        return nll
    if reduction == "per_row":
        return nll.sum(dim=1) / mask.sum(dim=1).clamp_min(1).to(nll.dtype)  # [B]
    return nll.sum() / mask.sum().clamp_min(1).to(nll.dtype)
