"""Position modes: which rotary positions the base model sees for working-context entries.

Entries carry *global* positions (span centres on the whole history's axis, obsidian "Positions").
LensNet reads those as they are. The base model was trained on positions ``0 .. max_seq_len-1``
only, so for it :func:`base_positions` maps them according to ``mc.positions``:

* ``global``: unchanged. A session longer than ``max_seq_len`` feeds positions the base never saw.
* ``bounded``: identical to ``global`` while the history fits the window (``N <= max_seq_len``),
  so everything trained or measured inside the window is untouched. Past it, the LOD0 recent tail
  (the last ``recent_tokens`` tokens) is shifted as a whole to end at ``max_seq_len - 1``, which
  keeps every distance inside the tail exact (RoPE sees only differences), and everything before
  the tail is scaled linearly into ``[0, max_seq_len - recent_tokens)``, which keeps the order and
  the relative spacing of the older entries. Every position is then in ``[0, max_seq_len)`` for
  any history length.

The history length ``N`` is read off the positions themselves: the last real entry of a working
context is always the LOD0 token ``N - 1`` (the recent tail is never empty), so the mapping needs
no extra argument and no host sync, and it runs inside compiled code and under every caller of
:meth:`mc.controller.MCController.base_logits` (training rows, inference, evaluation) alike.
"""
from __future__ import annotations

import torch
from torch import Tensor

from mc.config import POSITION_MODES


def base_positions(positions: Tensor, mask: Tensor, *, mode: str, window: int, recent: int) -> Tensor:
    """Map global entry positions ``[..., W]`` (``mask [..., W]`` True = real) to the base model's.

    ``window`` = ``model.max_seq_len``; ``recent`` = ``mc.recent_tokens`` (``< window``). Padding
    positions are left as they are."""
    if mode == "global":
        return positions
    if mode != "bounded":
        raise ValueError(f"unknown position mode {mode!r}; expected one of {', '.join(POSITION_MODES)}")
    if not 0 < recent < window:
        raise ValueError(f"bounded positions need 0 < recent_tokens ({recent}) < max_seq_len ({window})")
    pos = positions.to(torch.float32)
    last = torch.where(mask, pos, torch.full_like(pos, -1.0)).amax(-1, keepdim=True)  # [..., 1] = N - 1
    n = last + 1.0
    cut = n - recent  # global start of the exact LOD0 tail
    tail = pos - (n - window)  # the tail ends at window - 1
    older = pos * ((window - recent) / cut.clamp(min=1.0))  # [0, cut) -> [0, window - recent)
    mapped = torch.where(pos >= cut, tail, older)
    return torch.where(mask & (n > window), mapped, pos).to(positions.dtype)
