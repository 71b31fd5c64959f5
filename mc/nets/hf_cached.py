"""The KV-cached forward of a ``model=hf`` base: the decode step and the suffix recompute after an edit.

Owns :func:`forward_cached` (what :meth:`mc.nets.hf_base.HFBase.forward_cached` runs) and
:class:`SlotCache`, the object the decoder layers see as their ``past_key_values``.

How the model's own layers are driven with the project's cache (``mc.kv_cache.KVCache``,
``[L, 1, H_kv, C, hd]``): transformers' attention modules hand each layer's new keys and values
(already rotated by the table they were given) to ``past_key_values.update(k, v, layer_idx)`` and
attend over whatever it returns. :class:`SlotCache` writes them into the static storage at the
working-context slots of the new entries and returns the first ``window`` slots, so every decoder
layer runs its own code (projections, norms, grouped-query attention) and only storage and
positions are ours. Positions are the working context's LOD-aware rotary table, as in the
cache-free :meth:`HFBase.forward`, so the cached logits equal the whole-context pass's: the same
rule and the same equality test as the built-in GPT (``mc.nets.gpt_cached``; obsidian Inference).

Attention kernels (:func:`attention_without_plans`): on a GPU the eager cached forward leaves cuDNN's
attention out of SDPA's choice, because its key count changes on every call (obsidian Inference, "Decode on a GPU").
"""
from __future__ import annotations

import contextlib

import torch
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

__all__ = ["SlotCache", "attention_without_plans", "forward_cached"]

# SDPA's fused kernels that need no per-shape execution plan (cuDNN's attention is the one that does).
PLANLESS_BACKENDS = (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH)


def attention_without_plans(device: torch.device):
    """A context for the eager cached forward on ``device``: SDPA may pick any fused kernel but cuDNN's.

    Why: on Hopper GPUs torch prefers cuDNN's attention for bfloat16/float16 inputs, and cuDNN builds an
    execution plan for every new pair of query and key lengths. A decode step attends over one key more than
    the step before, and the task suite's prompts differ in length, so each call can pay a new plan: on an
    H200 the bfloat16 SmolLM2 decoded 16 tok/s with the cache against 40 without it (whose padded bucket keeps
    one shape). On a CPU, and inside a compiled graph (whose shapes are static per bucket), nothing changes.
    """
    if device.type != "cuda" or torch.compiler.is_compiling():
        return contextlib.nullcontext()
    return sdpa_kernel(list(PLANLESS_BACKENDS))


class SlotCache:
    """``past_key_values`` for one cached forward: new keys/values go to ``slots_s``, attention reads ``[:window]``."""

    def __init__(self, k_cache: Tensor, v_cache: Tensor, slots_s: Tensor, window: int) -> None:
        self.k, self.v, self.slots, self.window = k_cache, v_cache, slots_s, window

    def update(self, key_states: Tensor, value_states: Tensor, layer_idx: int, cache_kwargs=None) -> tuple[Tensor, Tensor]:
        k_c, v_c = self.k[layer_idx], self.v[layer_idx]  # [1, H_kv, C, hd]
        k_c.index_copy_(2, self.slots, key_states.to(k_c.dtype))
        v_c.index_copy_(2, self.slots, value_states.to(v_c.dtype))
        return k_c[:, :, : self.window], v_c[:, :, : self.window]


def forward_cached(base: nn.Module, embeds_1sd: Tensor, cos: Tensor, sin: Tensor, k_cache: Tensor, v_cache: Tensor,
                   slots_s: Tensor, window: int, masked: bool = True) -> Tensor:
    """Float32 logits ``[1, V]`` of the last of ``S`` new entries; the contract is :meth:`GPT.forward_cached`'s.

    ``cos, sin [S, hd]`` are :func:`mc.nets.positional.rotary_full`'s tables (``(cos, cos)`` and
    ``(-sin, sin)``); the layers' "rotate half" form is ``(cos, cos)`` and ``(sin, sin)``, so the
    first half of ``sin`` is negated back (exact).
    """
    dtype = base.dtype
    s = embeds_1sd.shape[1]
    half = cos.shape[-1] // 2
    sin_hf = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
    table = (cos[None].to(dtype), sin_hf[None].to(dtype))  # [1, S, hd] each
    mask = None  # unmasked: the caller passes window = the last slot + 1, so every key is allowed
    if masked:
        keys_w = torch.arange(window, device=embeds_1sd.device)
        allowed = (keys_w[None, :] <= slots_s[:, None])[None, None]  # [1, 1, S, window] causal by slot
        mask = torch.where(allowed, torch.zeros((), dtype=dtype, device=allowed.device),
                           torch.full((), torch.finfo(dtype).min, dtype=dtype, device=allowed.device))
    cache = SlotCache(k_cache, v_cache, slots_s, window)
    x = embeds_1sd.to(dtype)
    with attention_without_plans(x.device):
        for layer in base.layers:
            out = layer(x, attention_mask=mask, position_embeddings=table, past_key_values=cache)
            x = out[0] if isinstance(out, tuple) else out
    return base.lm_head(base.norm_f(x[:, -1])).float()  # [1, V]
