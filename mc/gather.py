"""The training gather, split into its host half (index tables) and its device half (one gather).

Owns :func:`gather_tables` (CPU only: where each entry of B*V working contexts comes from, its
LOD, position and token, and the LOD covering every token, vectorised over entries rather than a
Python loop per entry) and :func:`gather_planned` (device only: one ``index_select`` over the
concatenated tree levels, no host-device sync). :func:`mc.working_context.gather_batched` is the
two in a row; a stage-2 micro-step builds the tables ahead of time, off the device's critical
path (:mod:`mc.step_plan`, obsidian "Training": host/device split).

Row ``r`` of the tables belongs to sequence ``r // V``. The flat embedding table is level 0's
``B*T`` rows, then level 1's ``B*T/K`` rows, ..., then one zero row that padding points at.
"""
from __future__ import annotations

from typing import Protocol, Sequence

import torch
from torch import Tensor

from mc.config import PAD_ID

class TiledContext(Protocol):
    """What the tables read of a working context (``mc.working_context.WorkingContext`` is one). A Protocol, not
    an import: ``mc.working_context`` imports this module (through ``mc.materialize``), not the other way."""

    num_tokens: int
    max_lod: int
    block_size: int
    entries: list


def gather_tables(wcs: Sequence[TiledContext], *, batch: int, tokens: int, max_lod: int, bucket: int) -> dict:
    """Index tables of ``wcs`` (B*V of them, over ``batch`` sequences of ``tokens`` tokens), CPU tensors.

    Returns ``index [R, bucket]`` (row of the flat level table; the zero row for padding),
    ``lods [R, bucket]`` long, ``positions [R, bucket]`` float32 (span centres, 0 for padding),
    ``token_index [R, bucket]`` long (token position of LOD0 entries, -1 for gists and padding),
    ``lengths [R]`` long and ``lod_map [R, tokens]`` long (LOD of the entry covering each token).
    """
    R, B, T = len(wcs), batch, tokens
    if R == 0 or B <= 0 or R % B:
        raise ValueError(f"gather_tables: {R} working contexts is not a positive multiple of B={B}")
    V = R // B
    K = wcs[0].block_size
    for r, wc in enumerate(wcs):
        if wc.num_tokens != T:
            raise ValueError(f"gather_batched: working context {r} tiles {wc.num_tokens} tokens, levels hold T={T}")
        if wc.max_lod > max_lod:
            raise ValueError(f"gather_batched: working context {r} has max_lod={wc.max_lod} > {max_lod} levels given")
        if len(wc) > bucket:
            raise ValueError(f"gather_batched: working context {r} has {len(wc)} entries > bucket={bucket}")
        if wc.block_size != K:
            raise ValueError(f"gather_batched: working context {r} has K={wc.block_size}, the first has K={K}")
    lengths = torch.tensor([len(wc) for wc in wcs], dtype=torch.long)  # [R]
    flat = [e for wc in wcs for e in wc.entries]
    ent = torch.tensor(flat, dtype=torch.long).view(-1, 2)  # [N, 2] (lod, node index), rows back to back
    lod, idx = ent[:, 0], ent[:, 1]
    n = ent.shape[0]
    row = torch.repeat_interleave(torch.arange(R), lengths)  # [N] which working context
    first = torch.cumsum(lengths, 0) - lengths  # [R] where each row's entries start in `flat`
    col = torch.arange(n) - torch.repeat_interleave(first, lengths)  # [N] slot within the row
    width_of = torch.tensor([K**lv for lv in range(max_lod + 1)], dtype=torch.long)  # [L+1]
    sizes = T // width_of  # [L+1] nodes per sequence at each level
    offsets = torch.cumsum(B * sizes, 0) - B * sizes  # [L+1] first flat row of each level
    pad_row = int(B * sizes.sum())
    width = width_of[lod]  # [N]
    index = torch.full((R, bucket), pad_row, dtype=torch.long)
    index[row, col] = offsets[lod] + (row // V) * sizes[lod] + idx
    lods = torch.zeros((R, bucket), dtype=torch.long)
    lods[row, col] = lod
    positions = torch.zeros((R, bucket), dtype=torch.float32)
    # float64 first: the same rounding as the Python formula start + (width - 1) / 2
    positions[row, col] = ((idx * width).to(torch.float64) + (width - 1).to(torch.float64) / 2).to(torch.float32)
    token_index = torch.full((R, bucket), -1, dtype=torch.long)
    token_index[row, col] = torch.where(lod == 0, idx, -1)
    lod_map = torch.repeat_interleave(lod, width).view(R, T)  # every working context tiles exactly T tokens
    return {"index": index, "lods": lods, "positions": positions, "token_index": token_index,
            "lengths": lengths, "lod_map": lod_map}


def token_ids_of(token_ids_bt: Tensor, token_index_rw: Tensor, variants: int) -> Tensor:
    """``[R, W]`` token id of each LOD0 entry (``PAD_ID`` for gists and padding), on ``token_index_rw``'s device."""
    R, W = token_index_rw.shape
    seq = (torch.arange(R, device=token_index_rw.device) // variants)[:, None].expand(R, W)
    ids = token_ids_bt.to(token_index_rw.device)[seq, token_index_rw.clamp(min=0)]
    return torch.where(token_index_rw >= 0, ids, PAD_ID)


def gather_planned(levels: Sequence[Tensor], index_rw: Tensor, lengths_r: Tensor) -> tuple[Tensor, Tensor]:
    """Device half: ``(embeds [R, W, D], mask [R, W] bool)`` from the levels and the tables (no sync)."""
    D = levels[0].shape[-1]
    R, W = index_rw.shape
    table = torch.cat([lv.reshape(-1, D) for lv in levels] + [levels[0].new_zeros(1, D)])  # [sum B*N_L + 1, D]
    embeds = table.index_select(0, index_rw.reshape(-1)).reshape(R, W, D)
    mask = torch.arange(W, device=index_rw.device)[None, :] < lengths_r[:, None]
    return embeds, mask
