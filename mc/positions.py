"""Position modes: which rotary positions the base model sees for working-context entries.

Entries carry *global* positions (span centres on the whole history's axis, obsidian "Positions").
LensNet reads those as they are. The base model was trained on positions ``0 .. max_seq_len-1``
only, so for it :func:`base_positions` maps them according to ``mc.positions``:

* ``global``: unchanged. A session longer than ``max_seq_len`` feeds distances the base never saw.
* ``bounded``: identical to ``global`` while the history fits the window (``N <= max_seq_len``),
  so everything trained or measured inside the window is untouched. Past it, with ``W`` the
  window, ``R`` = ``recent_tokens`` and a step ``Q`` (:func:`bounded_step`), the history splits at
  ``c = floor((N - R) / Q) * Q``: the exact region ``[c, N)`` (the LOD0 tail and up to ``Q - 1``
  tokens before it) is shifted as a whole to start at ``W - R - Q + 1``, which keeps every distance in
  it exact (RoPE sees only differences), and everything before ``c`` is scaled linearly into
  ``[0, W - R - Q + 1)``, keeping order and relative spacing. Every position is in ``[0, W)`` for any
  history length. ``c`` moves in steps of ``Q`` tokens, so between steps an appended token leaves
  every earlier entry's position unchanged: the decode KV cache (``mc.decode``) stays valid
  (a mapping that moved with every token would invalidate the whole cache on every token).
* ``entries``: like ``bounded`` (identical to ``global`` inside the window, the same exact region
  past it), but the entries before ``c`` sit one position apart in entry order, ``0, 1, 2, ...``
  (closer only when more of them than ``W - R - Q + 1`` would not fit). Why: the linear map of
  ``bounded`` squeezes the older region by ``(W - R - Q + 1) / c``, so at 4x the window an expanded
  LOD0 run (a needle focus brought back) has its tokens ~0.2 positions apart, and the base's
  "previous token" attention, which keys on distance 1, cannot read it. Counting from the front
  keeps every older entry's position independent of the entries after it, so an edit changes only
  the positions from the edited entry on: the decode KV cache's suffix rule still holds.
* ``slots``: every entry at its index in the working context, ``0, 1, 2, ...``, at every history length
  (inside the window too, so it is a training choice, not only an evaluation one). Why: in a probe of
  a real base (SmolLM2, obsidian Positions) the raw tokens of an 8x-window oracle layout were read when
  numbered one apart with no gap before the question, and mostly missed with ``entries`` positions, which
  leave up to ``W - R - Q + 1 - n_older`` positions (thousands at ``max_seq_len`` 8192) between the older
  region and the exact one. Positions from an edited entry on move; so do the tail's after any
  edit before it, so the decode KV cache recomputes that suffix (the same rule as ``entries``).

The history length ``N`` is read off the positions themselves: the last real entry of a working
context is always the LOD0 token ``N - 1`` (the recent tail is never empty), so the mapping needs
no extra argument and no host sync, and it runs inside compiled code and under every caller of
:meth:`mc.controller.MCController.base_logits` (training rows, inference, evaluation) alike.
:func:`base_positions_list` is the same map on Python floats, for the decoder's cache keys.
"""
from __future__ import annotations

import torch
from torch import Tensor

from mc.config import POSITION_MODES


_CUT_MODES = ("bounded", "entries")  # the modes with an exact region whose start moves every Q tokens


def bounded_step(window: int, recent: int) -> int:
    """``Q``: how many tokens the exact region's start moves at a time (``R``, or less when
    ``2R`` would not fit the window); always ``1 <= Q <= window - recent``."""
    if not 0 < recent < window:
        raise ValueError(f"bounded positions need 0 < recent_tokens ({recent}) < max_seq_len ({window})")
    return max(1, min(recent, (window - recent) // 2))


def _check_mode(mode: str) -> None:
    if mode not in POSITION_MODES:
        raise ValueError(f"unknown position mode {mode!r}; expected one of {', '.join(POSITION_MODES)}")


def base_positions(positions: Tensor, mask: Tensor, *, mode: str, window: int, recent: int) -> Tensor:
    """Map global entry positions ``[..., W]`` (``mask [..., W]`` True = real) to the base model's.

    ``window`` = ``model.max_seq_len``; ``recent`` = ``mc.recent_tokens`` (``< window``). Padding
    positions are left as they are."""
    _check_mode(mode)
    if mode == "global":
        return positions
    if mode == "slots":
        rank = torch.cumsum(mask.to(torch.float32), -1) - 1.0  # [..., W] 0, 1, 2 ... over the real entries
        return torch.where(mask, rank.to(positions.dtype), positions)
    q = bounded_step(window, recent)
    pos = positions.to(torch.float32)
    last = torch.where(mask, pos, torch.full_like(pos, -1.0)).amax(-1, keepdim=True)  # [..., 1] = N - 1
    n = last + 1.0
    cut = torch.floor((n - recent) / q) * q  # start of the exact region, moves in steps of q
    start = float(window - recent - q + 1)  # where the exact region begins: its last token can reach window - 1
    exact = pos - cut + start
    if mode == "entries":
        older_mask = mask & (pos < cut)
        rank = torch.cumsum(older_mask.to(torch.float32), -1) - 1.0  # [..., W] 0, 1, 2 ... in entry order
        n_older = older_mask.sum(-1, keepdim=True).to(torch.float32)
        older = rank * (start / n_older.clamp(min=start))  # 1 apart unless they would pass start
    else:
        older = pos * (start / cut.clamp(min=1.0))  # [0, cut) -> [0, start)
    mapped = torch.where(pos >= cut, exact, older)
    return torch.where(mask & (n > window), mapped, pos).to(positions.dtype)


def base_positions_list(positions: list[float], *, mode: str, window: int, recent: int) -> list[float]:
    """:func:`base_positions` for one working context's positions as Python floats (all real, the
    last one the token ``N - 1``); equal to the tensor version's float32 values."""
    _check_mode(mode)
    if mode == "slots":
        return [float(i) for i in range(len(positions))]
    if mode == "global" or not positions or positions[-1] + 1.0 <= window:
        return list(positions)
    pos = torch.tensor(positions, dtype=torch.float32)[None]  # the tensor map itself: bit-equal values
    return base_positions(pos, torch.ones_like(pos, dtype=torch.bool), mode=mode, window=window, recent=recent)[0].tolist()


class IncrementalBasePositions:
    """:func:`base_positions_list` for one session, O(1) per plain append instead of ~15 tensor ops.

    Decoding appends one LOD0 token at a time. While the exact region's start ``c`` stays put (it
    moves every ``Q`` tokens) and the entries before the new one are unchanged, every earlier mapped
    position is unchanged too (the older map depends only on ``c`` and the entries before it; the exact
    region is a shift by ``c``), and the new token ``N - 1`` maps to ``N - 1 - c + start``: integers,
    exact in float32 as in the tensor map. Anything else (an edit, a step of ``c``, the first call past
    the window) recomputes the whole list with :func:`base_positions_list`; an unchanged list returns the
    previous map. Equality with it is tested.
    """

    _EXACT_LIMIT = 2.0 ** 20  # past ~1M tokens float32 cut arithmetic could round differently: recompute

    def __init__(self, *, mode: str, window: int, recent: int) -> None:
        _check_mode(mode)
        self.mode, self.window, self.recent = mode, window, recent
        self.q = bounded_step(window, recent) if mode in _CUT_MODES else 1
        self.start = float(window - recent - self.q + 1)
        self._last_in: list[float] | None = None
        self._last_out: list[float] = []

    def _cut(self, n: float) -> float:
        return float(int((n - self.recent) // self.q) * self.q)

    def __call__(self, positions: list[float]) -> list[float]:
        prev = self._last_in
        if prev is not None and positions == prev:  # nothing changed since the last call (compared in C)
            return self._last_out
        if self.mode == "slots" and prev is not None and len(positions) == len(prev) + 1 and positions[:-1] == prev:
            out = [*self._last_out, float(len(prev))]  # a plain append: the new entry takes the next slot
            self._last_in, self._last_out = positions, out
            return out
        n = positions[-1] + 1.0 if positions else 0.0
        cut = self._cut(n)
        if (self.mode in _CUT_MODES and prev is not None and len(positions) == len(prev) + 1
                and self.window < prev[-1] + 1.0 and n < self._EXACT_LIMIT
                and cut == self._cut(prev[-1] + 1.0) and positions[:-1] == prev):
            out = [*self._last_out, positions[-1] - cut + self.start]
        else:
            out = base_positions_list(positions, mode=self.mode, window=self.window, recent=self.recent)
        self._last_in, self._last_out = positions, out
        return out
