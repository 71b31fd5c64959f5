"""Rotary position encodings for tokens and for gists (LOD-aware).

Owns: the rotary frequencies, plain rotary cos/sin for (float) positions, the LOD-aware cos/sin
used for working-context entries, and applying a rotation to queries/keys.

Conventions
-----------
* ``head_dim`` is even; band ``i`` (``0 <= i < head_dim/2``) rotates the pair of channels
  ``(i, i + head_dim/2)`` (the "half-split" layout) by the angle ``position * freq[i]``.
* Positions are floats. The working context gives every entry its **span centre**
  ``start + (width - 1) / 2``; for an LOD0 entry that is exactly the token index, so the base
  model sees the positions it was pretrained on.
* An LOD-L entry spans ``S = K**L`` tokens. A band whose wavelength ``2*pi/freq`` is shorter
  than the span cannot say anything sensible about where *inside* the span the content sits
  (its phase wraps around at least once across the span), so its amplitude is damped:

      amplitude = clamp(wavelength / S, 0, 1)

  i.e. 1 for every band that turns less than once across the span, and falling off in
  proportion to ``wavelength / S`` below that. This is the monotone envelope of what averaging
  the rotary phasor over the span would give (the mean of ``exp(i*freq*t)`` over a window of
  width S decays like ``wavelength / (pi*S)`` for short wavelengths), without the sign-flipping
  side lobes of the exact sinc, and it leaves long wavelengths at exactly 1.
* LOD0: ``S = 1`` and the shortest rotary wavelength is ``2*pi > 1``, so the amplitude is
  exactly 1.0 for every band and ``lod_rotary_cos_sin`` equals ``rotary_cos_sin`` bit for bit
  (multiplying a float by 1.0 is exact).

Damped cos/sin are no longer a pure rotation: ``apply_rotary`` scales the damped channel pairs
by the amplitude, so those bands contribute less to ``q . k`` for coarse entries. For LOD0
(amplitude 1) ``apply_rotary`` is a rotation and preserves norms.

Everything here is a pure tensor function (no ``.item()``, no Python state), so it can be
called inside compiled code; value checks that would need a device sync (e.g. negative LODs)
are documented preconditions, while shape problems raise ``ValueError``.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["rope_frequencies", "rotary_cos_sin", "lod_amplitude", "lod_rotary_cos_sin", "apply_rotary",
           "rotary_full", "apply_rotary_full"]


def _check_head_dim(head_dim: int) -> None:
    if not isinstance(head_dim, int) or isinstance(head_dim, bool) or head_dim <= 0 or head_dim % 2:
        raise ValueError(f"head_dim={head_dim!r} must be a positive even integer (rotary rotates channel pairs)")


def rope_frequencies(head_dim: int, base: float, *, device=None) -> Tensor:
    """Angular frequencies of the rotary bands: ``base ** (-2i / head_dim)`` -> ``[head_dim // 2]`` float32.

    Band 0 has frequency 1 (wavelength 2*pi tokens); later bands are slower (longer wavelengths).
    """
    _check_head_dim(head_dim)
    if not base > 1.0:
        raise ValueError(f"rotary base={base!r} must be > 1 (frequencies must decrease across bands)")
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float64, device=device) / head_dim  # [hd/2]
    # float64 then float32 so the frequencies do not depend on the device's pow precision.
    return (1.0 / (float(base) ** exponents)).to(torch.float32)


def _as_float_positions(positions: Tensor) -> Tensor:
    if not isinstance(positions, Tensor):
        raise ValueError(f"positions must be a tensor [..., W], got {type(positions).__name__}")
    if positions.dim() < 1:
        raise ValueError(f"positions must have at least one dim [..., W], got shape {tuple(positions.shape)}")
    # Angles are formed in float32 at least (bf16 positions would lose whole token indices).
    return positions.to(torch.float32) if positions.dtype != torch.float64 else positions


def rotary_cos_sin(positions: Tensor, head_dim: int, base: float) -> tuple[Tensor, Tensor]:
    """Plain rotary encoding: ``positions [..., W]`` (float or int) -> ``cos, sin [..., W, head_dim//2]`` float32."""
    pos = _as_float_positions(positions)
    freqs = rope_frequencies(head_dim, base, device=pos.device).to(pos.dtype)  # [hd/2]
    angles = pos.unsqueeze(-1) * freqs  # [..., W, hd/2]
    return torch.cos(angles).to(torch.float32), torch.sin(angles).to(torch.float32)


def lod_amplitude(lods: Tensor, block_size: int, head_dim: int, base: float) -> Tensor:
    """Per-band amplitude ``clamp(wavelength / K**lod, 0, 1)``: ``lods [..., W]`` -> ``[..., W, head_dim//2]`` float32.

    ``lods`` must be >= 0 (not checked on values: that would need a device sync).
    LOD0 gives exactly 1.0 everywhere because every rotary wavelength is >= 2*pi > 1 token.
    """
    if not isinstance(block_size, int) or isinstance(block_size, bool) or block_size < 2:
        raise ValueError(f"block_size={block_size!r} must be an integer >= 2 (K entries per gist)")
    if not isinstance(lods, Tensor) or lods.dtype.is_floating_point or lods.dtype == torch.bool:
        raise ValueError("lods must be an integer tensor [..., W] (the level of detail of each entry)")
    freqs = rope_frequencies(head_dim, base, device=lods.device)  # [hd/2]
    wavelengths = (2.0 * math.pi) / freqs  # [hd/2]
    span = torch.pow(float(block_size), lods.to(torch.float32))  # [..., W]; a scalar base: no host->device copy
    return torch.clamp(wavelengths / span.unsqueeze(-1), 0.0, 1.0)  # [..., W, hd/2]


def lod_rotary_cos_sin(positions: Tensor, lods: Tensor, block_size: int, head_dim: int,
                       base: float) -> tuple[Tensor, Tensor]:
    """LOD-aware rotary encoding for working-context entries.

    positions [..., W] float (span centres), lods [..., W] integer (same shape) ->
    cos, sin [..., W, head_dim//2] float32 = plain rotary cos/sin times :func:`lod_amplitude`.
    Entries with lod 0 get exactly :func:`rotary_cos_sin`.
    """
    if not isinstance(lods, Tensor) or not isinstance(positions, Tensor) or lods.shape != positions.shape:
        got = tuple(lods.shape) if isinstance(lods, Tensor) else type(lods).__name__
        want = tuple(positions.shape) if isinstance(positions, Tensor) else type(positions).__name__
        raise ValueError(f"lods shape {got} must equal positions shape {want} (one LOD per entry)")
    cos, sin = rotary_cos_sin(positions, head_dim, base)  # [..., W, hd/2]
    amp = lod_amplitude(lods, block_size, head_dim, base)  # [..., W, hd/2]
    return cos * amp, sin * amp


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate channel pairs ``(i, i + hd/2)`` of ``x [B, H, W, hd]`` by per-entry cos/sin.

    cos/sin: ``[B, W, hd/2]`` (per row) or ``[W, hd/2]`` (shared by the batch). They are cast to
    ``x.dtype``; the result has x's shape and dtype.
    """
    if x.dim() != 4 or x.shape[-1] % 2:
        raise ValueError(f"x must be [B, H, W, head_dim] with an even head_dim, got shape {tuple(x.shape)}")
    if cos.shape != sin.shape:
        raise ValueError(f"cos {tuple(cos.shape)} and sin {tuple(sin.shape)} must have the same shape")
    b, _, w, hd = x.shape
    half = hd // 2
    if cos.dim() == 3 and cos.shape[0] in (1, b) and tuple(cos.shape[1:]) == (w, half):
        cos_b1wh, sin_b1wh = cos.unsqueeze(1), sin.unsqueeze(1)  # [B, 1, W, hd/2]
    elif cos.dim() == 2 and tuple(cos.shape) == (w, half):
        cos_b1wh, sin_b1wh = cos, sin  # [W, hd/2] broadcasts over B and H
    else:
        raise ValueError(f"cos/sin shape {tuple(cos.shape)} does not fit x {tuple(x.shape)}: "
                         f"expected [B={b}, W={w}, {half}] or [W={w}, {half}]")
    cos_b1wh = cos_b1wh.to(x.dtype)
    sin_b1wh = sin_b1wh.to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]  # [B, H, W, hd/2] each
    return torch.cat((x1 * cos_b1wh - x2 * sin_b1wh, x1 * sin_b1wh + x2 * cos_b1wh), dim=-1)


def rotary_full(cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """Full-width tables for :func:`apply_rotary_full`: ``cos, sin [..., hd/2]`` -> ``[..., hd]``
    ``(cos, cos)`` and ``(-sin, sin)``. Build them once per call and share them across layers."""
    return torch.cat((cos, cos), dim=-1), torch.cat((-sin, sin), dim=-1)


def apply_rotary_full(x: Tensor, cos_full: Tensor, sin_signed: Tensor) -> Tensor:
    """:func:`apply_rotary` in 4 ops instead of ~10, for the op-bound decode step.

    ``x [..., hd]``, tables from :func:`rotary_full` broadcasting against ``x``. ``roll`` swaps the
    halves, so the first half is ``x1*cos + x2*(-sin)`` and the second ``x2*cos + x1*sin``: the same
    products as :func:`apply_rotary`, and ``a + (-b)`` is ``a - b`` exactly in IEEE arithmetic
    (addition commutes exactly too), so the result is bit-equal to it in eager mode.
    """
    return x * cos_full + torch.roll(x, x.shape[-1] // 2, dims=-1) * sin_signed
