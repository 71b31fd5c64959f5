"""The base model's KV-cached forward: the decode step, and the suffix recompute after an edit.

Owns :func:`forward_cached` (what :meth:`mc.nets.gpt.GPT.forward_cached` runs) and
:func:`layer_weights`, the flat per-layer view of the weights it reads.

Why a flat view and one function instead of methods on the blocks: at decode sizes (one entry,
d=64 on the cpu preset) a step is bound by per-call overhead, not arithmetic, and walking
``nn.Module`` attributes (~45 ``__getattr__`` calls) through nested module methods cost about a
quarter of an eager step. The view is rebuilt on every call from the modules' own dicts (plain
dict lookups), so it cannot go stale when weights are loaded or swapped.

The ops are :meth:`GPT.forward`'s, function for function and in the same order per row
(:func:`mc.nets.positional.apply_rotary_full` is bit-equal to ``apply_rotary``), so an entry's
logits equal the whole-context pass's: ``tests/test_kv_cache.py`` checks greedy equality. Compiled on a CPU, the
attention is written out (:func:`_attention`): the compiled step matches the reference to float rounding, as any
compiled graph does.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mc.nets.positional import apply_rotary_full


class LayerWeights(NamedTuple):
    """One block's weights (``q_norm``/``k_norm`` None when the model has no QK-norm) and norm eps."""

    norm1: Tensor
    norm1_eps: float
    qkv: Tensor
    q_norm: Tensor | None
    q_eps: float
    k_norm: Tensor | None
    k_eps: float
    proj: Tensor
    norm2: Tensor
    norm2_eps: float
    fc: Tensor
    fc_out: Tensor


def _norm(m: nn.Module) -> tuple[Tensor | None, float]:
    w = m._parameters.get("weight")  # nn.Identity (no QK-norm) has none
    return w, getattr(m, "eps", 0.0)


def layer_weights(gpt: nn.Module) -> list[LayerWeights]:
    """The weights of every block, read straight from the modules' dicts (see the module docstring)."""
    out = []
    for block in gpt._modules["blocks"]._modules.values():
        m = block._modules
        attn, mlp = m["attn"]._modules, m["mlp"]._modules
        n1, e1 = _norm(m["norm1"])
        qn, qe = _norm(attn["q_norm"])
        kn, ke = _norm(attn["k_norm"])
        n2, e2 = _norm(m["norm2"])
        out.append(LayerWeights(n1, e1, attn["qkv"]._parameters["weight"], qn, qe, kn, ke,
                                attn["proj"]._parameters["weight"], n2, e2, mlp["fc"]._parameters["weight"],
                                mlp["proj"]._parameters["weight"]))
    return out


def _attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """``softmax(q kᵀ / sqrt(hd), mask) v``: SDPA, except written out when compiled for a CPU.

    Why: inductor cannot fuse the SDPA op; on a CPU it stays a call of its own (~25 us per layer at decode sizes,
    d=64, one query), while the written-out form compiles into inductor's fused kernels with the ops around it: the
    compiled decode step took ~0.16 ms instead of ~0.21 (obsidian Inference, "Compiled attention"). Eager calls and
    CUDA keep SDPA (on CUDA its kernels were not measured against the written-out form)."""
    if not (torch.compiler.is_compiling() and q.device.type == "cpu"):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    att = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)  # [1, H, S, window]
    if mask is not None:
        att = att.masked_fill(~mask, float("-inf"))  # every row keeps its own slot: never all -inf
    return torch.softmax(att, dim=-1) @ v


def forward_cached(gpt: nn.Module, embeds_1sd: Tensor, cos: Tensor, sin: Tensor, k_cache: Tensor, v_cache: Tensor,
                   slots_s: Tensor, window: int, masked: bool = True) -> Tensor:
    """Logits ``[1, V]`` of the last of ``S`` new entries; the contract is :meth:`GPT.forward_cached`'s."""
    cfg = gpt.cfg
    h, d = cfg.n_heads, cfg.d_model
    hd = d // h
    s = embeds_1sd.shape[1]
    mask_11sw = None  # unmasked: the caller passes window = the last slot + 1, so every key is allowed
    if masked:
        keys_w = torch.arange(window, device=embeds_1sd.device)
        mask_11sw = (keys_w[None, :] <= slots_s[:, None])[None, None]  # [1, 1, S, window]
    x = embeds_1sd
    for i, w in enumerate(layer_weights(gpt)):
        qkv = F.linear(F.rms_norm(x, (d,), w.norm1, w.norm1_eps), w.qkv).view(1, s, 3, h, hd)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each [1, H, S, hd]
        if w.q_norm is not None:
            q = F.rms_norm(q, (hd,), w.q_norm, w.q_eps)
        if w.k_norm is not None:
            k = F.rms_norm(k, (hd,), w.k_norm, w.k_eps)
        # One rotation over queries and keys together (elementwise: the same values as two calls).
        qk = apply_rotary_full(torch.cat((q, k), dim=1), cos, sin)  # [1, 2H, S, hd]
        k_c, v_c = k_cache[i], v_cache[i]  # [1, H, C, hd]
        k_c.index_copy_(2, slots_s, qk[:, h:])
        v_c.index_copy_(2, slots_s, v)
        y = _attention(qk[:, :h], k_c[:, :, :window], v_c[:, :, :window], mask_11sw)  # [1, H, S, hd]
        x = x + F.linear(y.transpose(1, 2).reshape(1, s, d), w.proj)
        x = x + F.linear(F.gelu(F.linear(F.rms_norm(x, (d,), w.norm2, w.norm2_eps), w.fc)), w.fc_out)
    norm_f, lm_head = gpt._modules["norm_f"], gpt._modules["lm_head"]
    return F.linear(F.rms_norm(x[:, -1], (d,), norm_f._parameters["weight"], norm_f.eps),
                    lm_head._parameters["weight"])  # [1, V]
