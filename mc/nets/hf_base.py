"""The Hugging Face adapter: a loaded causal LM driven as the frozen base of the working context.

Owns: :class:`HFBase`, which exposes the same interface as :class:`mc.nets.gpt.GPT` (``embed``,
``head_dim``, ``cfg``, ``forward(token_ids | embeds, cos, sin, key_padding_mask)``) over the HF
model's own parts: its input embedding table, its decoder layers, its final norm and its LM head.
Loading a directory and syncing ``model.*`` with it live in :mod:`mc.nets.hf_load`.

Positions: the decoder layers take the rotary table as an input (``position_embeddings=(cos,
sin)``, each ``[B, W, head_dim]`` in the "rotate half" layout: the first half of the channels pairs
with the second half, and cos/sin repeat their ``head_dim/2`` bands twice). That is the same
pairing as :func:`mc.nets.positional.apply_rotary`, so the working context's per-entry LOD-aware
``cos, sin [B, W, head_dim/2]`` are passed as ``cat([cos, cos])`` and an LOD0 entry sees exactly
the rotation the model was trained with. The adapter checks at construction that the model's own
inverse frequencies equal :func:`mc.nets.positional.rope_frequencies` for its ``rope_theta``, so a
rotary variant the controller does not reproduce (scaled RoPE types, partial rotary) is refused
with one line rather than silently mis-positioned. See obsidian Base models.

Mask: an additive float mask ``[B, 1, W, W]`` (0 = may attend, dtype minimum = may not): causal and
real key, or self (a padding query row is never all-masked). Additive masks mean the same to the
eager and the SDPA attention implementations of transformers.

Dtype: ``embed`` returns float32 and ``forward`` returns float32 logits whatever ``model.hf_dtype``
is, so the controller, GistNet and LensNet keep their float32 contract; the cast happens here.
"""
from __future__ import annotations

import inspect

import torch
from torch import Tensor, nn

from mc.config import ConfigError, ModelConfig
from mc.nets.gpt import at_positions
from mc.nets.hf_cached import forward_cached
from mc.nets.positional import rope_frequencies, rotary_cos_sin

__all__ = ["HFBase", "HFBaseError"]

_FINAL_NORM_NAMES = ("norm", "final_layer_norm", "final_layernorm", "ln_f")
_PARITY_TOKENS = 24
# Relative max |logit difference| allowed at construction, by weight dtype: float32 rounding is ~1e-6
# of the largest logit; 16-bit formats carry ~3 significant digits through 30 layers.
_PARITY_RTOL = {torch.float32: 1e-3, torch.bfloat16: 5e-2, torch.float16: 5e-2}


class HFBaseError(ConfigError):
    """The model at ``model.hf_path`` cannot serve as the base (one line: the model or path, and why).
    A ConfigError, so the workflow and the harness stop at start-up with exit 2."""


def _rotary_module(inner: nn.Module, arch: str) -> nn.Module:
    rotary = getattr(inner, "rotary_emb", None)
    layers = getattr(inner, "layers", None)
    takes_table = layers is not None and len(layers) > 0 and \
        "position_embeddings" in inspect.signature(layers[0].forward).parameters
    if rotary is None or not hasattr(rotary, "inv_freq") or not takes_table:
        raise HFBaseError(f"{arch} has no rotary position embedding that its decoder layers take as an input; "
                          "model=hf needs a rotary model (Llama, Qwen2, Mistral families; see obsidian Base models)")
    return rotary


class HFBase(nn.Module):
    """A frozen HF causal LM over token ids or over working-context embeddings (see module docstring)."""

    def __init__(self, hf_model: nn.Module, cfg: ModelConfig):
        super().__init__()
        arch = type(hf_model).__name__
        inner = getattr(hf_model, "base_model", None)
        if inner is None or inner is hf_model:
            raise HFBaseError(f"{arch} is not a causal LM with a separate decoder (no base_model); load a *ForCausalLM model")
        rotary = _rotary_module(inner, arch)
        rope = dict(getattr(hf_model.config, "rope_parameters", None) or {})
        rope_type = rope.get("rope_type", "default")
        if rope_type != "default" or float(getattr(rotary, "attention_scaling", 1.0)) != 1.0:
            raise HFBaseError(f"{arch} uses rope_type={rope_type!r}; model=hf supports plain rotary (rope_type "
                              "'default') only: the LOD-aware positions reproduce the plain frequencies")
        inv_freq = rotary.inv_freq.detach().float().cpu()  # [rotary_dim/2]
        head_dim = int(getattr(hf_model.config, "head_dim", None)
                       or hf_model.config.hidden_size // hf_model.config.num_attention_heads)
        if 2 * inv_freq.numel() != head_dim:
            raise HFBaseError(f"{arch} rotates {2 * inv_freq.numel()} of {head_dim} head channels (partial rotary); "
                              "model=hf supports rotary over the whole head only")
        ours = rope_frequencies(head_dim, cfg.rope_base)
        if not torch.allclose(inv_freq, ours, rtol=1e-5, atol=0.0):
            raise HFBaseError(f"{arch}'s rotary frequencies do not match rope_theta={cfg.rope_base} over head_dim={head_dim}; "
                              "a rotary variant model=hf does not reproduce")
        norm = next((getattr(inner, n) for n in _FINAL_NORM_NAMES if isinstance(getattr(inner, n, None), nn.Module)), None)
        lm_head = hf_model.get_output_embeddings()
        if norm is None or lm_head is None:
            raise HFBaseError(f"{arch} has no final norm ({'/'.join(_FINAL_NORM_NAMES)}) or no LM head; load a *ForCausalLM model")
        self.cfg = cfg
        self.arch = arch
        self.tok_emb = hf_model.get_input_embeddings()
        self.layers = inner.layers
        self.norm_f = norm
        self.lm_head = lm_head
        self._head_dim = head_dim
        self._kv_heads = int(getattr(hf_model.config, "num_key_value_heads", None) or hf_model.config.num_attention_heads)
        self.requires_grad_(False)  # a frozen reader: stage 2 never trains it
        self.eval()
        self._check_parity(hf_model.eval())

    def _check_parity(self, hf_model: nn.Module) -> None:
        """Refuse an architecture whose forward the adapter does not reproduce (HFBaseError naming it).

        The adapter drives the decoder layers itself, so anything a model does outside them (Granite's
        embedding, residual and logit multipliers, Cohere's interleaved rotary and logit scale) would be
        lost without an error. One short sequence through both settles it: the relative max difference
        of the logits must stay at rounding level (float32: ~1e-6 on SmolLM2; a wrong adapter: ~0.1-1).
        """
        n = _PARITY_TOKENS
        rows = min(int(self.tok_emb.weight.shape[0]), int(self.cfg.vocab_size))
        ids = torch.randint(0, rows, (1, n), generator=torch.Generator().manual_seed(0)).to(self.tok_emb.weight.device)
        # Full float32 matmuls for the check: under TF32 (the GPU training setting) two correct but differently
        # ordered forwards already differ by ~1e-3 (SmolLM2 on an H100: 1.1e-3), which would hide the question.
        precision = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("highest")
        try:
            with torch.no_grad():
                ref = hf_model(input_ids=ids).logits.float()  # [1, n, V]
                ours = self(embeds=self.embed(ids))  # the working-context path, plain positions 0..n-1
        finally:
            torch.set_float32_matmul_precision(precision)
        tol = _PARITY_RTOL[self.dtype]
        rel = float((ours - ref).abs().max() / ref.abs().max().clamp_min(1e-6)) if ours.shape == ref.shape else float("inf")
        if not rel <= tol:  # also catches NaN
            agree = float((ours.argmax(-1) == ref.argmax(-1)).float().mean()) if ours.shape == ref.shape else 0.0
            raise HFBaseError(f"{self.arch}: the adapter's logits differ from the model's own forward (relative max "
                              f"difference {rel:.2g} > {tol:g}, argmax agreement {agree:.0%}); this architecture does "
                              "something outside its decoder layers that model=hf does not reproduce (see obsidian "
                              "Base models for the families checked)")

    @property
    def head_dim(self) -> int:
        return self._head_dim

    @property
    def kv_heads(self) -> int:
        """Key/value heads per layer (grouped-query attention: fewer than the query heads): the KV cache's H."""
        return self._kv_heads

    @property
    def dtype(self) -> torch.dtype:
        return self.tok_emb.weight.dtype

    def embed(self, token_ids: Tensor) -> Tensor:
        """Token ids ``[B, T]`` (integer) -> float32 embeddings ``[B, T, D]`` from the model's input table."""
        if not isinstance(token_ids, Tensor) or token_ids.dtype.is_floating_point or token_ids.dtype == torch.bool:
            raise ValueError("token_ids must be an integer tensor of token ids")
        return self.tok_emb(token_ids).float()

    def forward(self, token_ids: Tensor | None = None, *, embeds: Tensor | None = None,
                cos: Tensor | None = None, sin: Tensor | None = None,
                key_padding_mask: Tensor | None = None, logit_index: Tensor | None = None) -> Tensor:
        """Float32 logits ``[B, W, V]`` (``[B, Q, V]`` with ``logit_index``); arguments as :meth:`mc.nets.gpt.GPT.forward`."""
        if (token_ids is None) == (embeds is None):
            raise ValueError("HFBase.forward needs exactly one of token_ids [B, T] or embeds [B, W, D]")
        if token_ids is not None:
            if token_ids.dim() != 2:
                raise ValueError(f"token_ids must be [B, T], got shape {tuple(token_ids.shape)}")
            x_bwd = self.tok_emb(token_ids)
        else:
            if embeds.dim() != 3 or embeds.shape[-1] != self.cfg.d_model:
                raise ValueError(f"embeds must be [B, W, D={self.cfg.d_model}], got shape {tuple(embeds.shape)}")
            x_bwd = embeds.to(self.dtype)
        b, w, _ = x_bwd.shape
        if (cos is None) != (sin is None):
            raise ValueError("give both cos and sin, or neither (plain rotary positions 0..W-1)")
        if cos is None:
            cos, sin = rotary_cos_sin(torch.arange(w, device=x_bwd.device), self.head_dim, self.cfg.rope_base)
        half = self.head_dim // 2
        if tuple(cos.shape) not in ((b, w, half), (1, w, half), (w, half)) or cos.shape != sin.shape:
            raise ValueError(f"cos/sin must be [B={b}, W={w}, {half}] or [W={w}, {half}] (head_dim/2), "
                             f"got {tuple(cos.shape)} and {tuple(sin.shape)}")
        if cos.dim() == 2:
            cos, sin = cos[None], sin[None]  # [1, W, hd/2]
        # The layers' "rotate half" table: each band's angle on channel i and on channel i + hd/2.
        table = (torch.cat((cos, cos), dim=-1).to(self.dtype), torch.cat((sin, sin), dim=-1).to(self.dtype))  # [B|1, W, hd]
        mask_b1ww = self._additive_mask(key_padding_mask, b, w, x_bwd.device)
        for layer in self.layers:
            out = layer(x_bwd, attention_mask=mask_b1ww, position_embeddings=table)
            x_bwd = out[0] if isinstance(out, tuple) else out  # older layers return (hidden, ...)
        return self.lm_head(self.norm_f(at_positions(x_bwd, logit_index))).float()  # [B, W, V] or [B, Q, V]

    def forward_cached(self, embeds_1sd: Tensor, cos: Tensor, sin: Tensor, k_cache: Tensor, v_cache: Tensor,
                       slots_s: Tensor, window: int, masked: bool = True) -> Tensor:
        """Float32 logits ``[1, V]`` of the last of ``S`` new entries, reusing cached keys/values: the
        contract of :meth:`mc.nets.gpt.GPT.forward_cached` (cache ``[L, 1, kv_heads, C, head_dim]``); the
        model's own decoder layers run it (:mod:`mc.nets.hf_cached`)."""
        return forward_cached(self, embeds_1sd, cos, sin, k_cache, v_cache, slots_s, window, masked)

    def _additive_mask(self, key_padding_mask: Tensor | None, b: int, w: int, device) -> Tensor:
        """``[B|1, 1, W, W]`` float: 0 where query i may attend key j (j <= i and j real, or j == i)."""
        idx = torch.arange(w, device=device)
        allowed = (idx[None, :] <= idx[:, None])[None]  # [1, W, W] causal
        if key_padding_mask is not None:
            if key_padding_mask.dtype != torch.bool or tuple(key_padding_mask.shape) != (b, w):
                raise ValueError(f"key_padding_mask must be a bool tensor [B={b}, W={w}] (True = real), "
                                 f"got {key_padding_mask.dtype} {tuple(key_padding_mask.shape)}")
            allowed = (allowed & key_padding_mask[:, None, :]) | (idx[None, :] == idx[:, None])[None]  # [B, W, W]
        zero = torch.zeros((), dtype=self.dtype, device=device)
        neg = torch.full((), torch.finfo(self.dtype).min, dtype=self.dtype, device=device)
        return torch.where(allowed, zero, neg)[:, None]  # [B|1, 1, W, W]
