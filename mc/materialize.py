"""Materialising working contexts: entries -> padded tensors the nets and the base model read.

Owns the fixed-capacity :class:`WCBuffer`, the bucket ladder (:func:`bucket_for`), the inference
gather of one session's context into that buffer (:func:`materialize`) and the batched,
differentiable training gather (:func:`gather_batched`). The working context itself (entries,
invariants, edits) lives in :mod:`mc.working_context`; see obsidian "Working Context".

Positions written here are the entries' *global* span centres (``WorkingContext.positions()``):
LensNet reads them as they are, and the base model's position mode (``mc.positions``) maps them
in :meth:`mc.controller.MCController.base_logits` (see obsidian "Positions").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import torch
from torch import Tensor

from mc.config import PAD_ID
from mc.gather import TiledContext, gather_planned, gather_tables, token_ids_of
from mc.tree import LifetimeGistTree


class LaidOutContext(TiledContext, Protocol):
    """What materialising reads of a working context beyond the tables' fields
    (``mc.working_context.WorkingContext`` is one). A Protocol, not an import: ``mc.working_context``
    imports this module and re-exports its names."""

    def __len__(self) -> int: ...
    def lods(self) -> list[int]: ...
    def positions(self) -> list[float]: ...


def bucket_for(n: int, ladder: Sequence[int]) -> int:
    """Smallest ladder value >= n; ValueError if the ladder is too short."""
    for b in sorted(ladder):
        if b >= n:
            return b
    raise ValueError(f"no bucket in ladder {list(ladder)} holds {n} entries; add a larger bucket")


class WCBuffer:
    """Preallocated, fixed-capacity tensors a WC is materialised into (static addresses)."""

    def __init__(self, capacity: int, dim: int, *, device=None, dtype: torch.dtype = torch.float32) -> None:
        if not isinstance(capacity, int) or capacity <= 0 or not isinstance(dim, int) or dim <= 0:
            raise ValueError(f"WCBuffer capacity and dim must be positive integers, got {capacity!r}, {dim!r}")
        self.capacity = capacity
        self.dim = dim
        self.embeds = torch.zeros(capacity, dim, device=device, dtype=dtype)  # [C, D]
        self.mask = torch.zeros(capacity, dtype=torch.bool, device=device)  # [C] True = real
        self.positions = torch.zeros(capacity, dtype=torch.float32, device=device)  # [C]
        self.lods = torch.zeros(capacity, dtype=torch.long, device=device)  # [C]
        self.token_ids = torch.full((capacity,), PAD_ID, dtype=torch.long, device=device)  # [C]


@dataclass
class MaterializedWC:
    embeds: Tensor  # [bucket, D] (view into the buffer)
    mask: Tensor  # [bucket] bool, True = real
    positions: Tensor  # [bucket] float32 (0 for padding)
    lods: Tensor  # [bucket] long (0 for padding)
    token_ids: Tensor  # [bucket] long: token id for LOD0 entries, PAD_ID otherwise
    length: int  # real entries
    bucket: int


@torch.no_grad()
def materialize(wc: LaidOutContext, tree: LifetimeGistTree, buffer: WCBuffer, ladder: Sequence[int]) -> MaterializedWC:
    """Gather ``wc``'s entries from ``tree`` into ``buffer``, padded to a bucket of ``ladder``.

    Writes in place (the buffer's tensors keep their addresses); one index_select per level.
    The returned tensors are views of the buffer: the next materialize overwrites them.
    """
    if tree.num_tokens != wc.num_tokens:
        raise ValueError(f"materialize: the tree holds {tree.num_tokens} tokens but the working context tiles "
                         f"{wc.num_tokens}; append to both before materialising")
    if tree.block_size != wc.block_size or tree.max_lod < wc.max_lod:
        raise ValueError(f"materialize: tree (K={tree.block_size}, max_lod={tree.max_lod}) does not match the "
                         f"working context (K={wc.block_size}, max_lod={wc.max_lod})")
    if buffer.dim != tree.dim:
        raise ValueError(f"materialize: buffer dim {buffer.dim} != tree dim {tree.dim}")
    n = len(wc)
    bucket = bucket_for(n, ladder)
    if bucket > buffer.capacity:
        raise ValueError(f"materialize: bucket {bucket} exceeds the buffer capacity {buffer.capacity}")
    dev = buffer.embeds.device
    lods = torch.tensor(wc.lods(), dtype=torch.long, device=dev)  # [n]
    idx = torch.tensor([i for _, i in wc.entries], dtype=torch.long, device=dev)  # [n]
    slots = torch.arange(n, device=dev)
    for lod in range(wc.max_lod + 1):
        sel = lods == lod
        buffer.embeds.index_copy_(0, slots[sel], tree.level(lod).to(dev, buffer.embeds.dtype).index_select(0, idx[sel]))
    buffer.embeds[n:bucket].zero_()
    buffer.mask[:n] = True
    buffer.mask[n:bucket] = False
    buffer.positions[:n] = torch.tensor(wc.positions(), dtype=torch.float32, device=dev)
    buffer.positions[n:bucket] = 0.0
    buffer.lods[:n] = lods
    buffer.lods[n:bucket] = 0
    ids = tree.token_ids().to(dev).index_select(0, torch.where(lods == 0, idx, 0))  # gists read row 0, then PAD
    buffer.token_ids[:n] = torch.where(lods == 0, ids, PAD_ID)
    buffer.token_ids[n:bucket] = PAD_ID
    return MaterializedWC(embeds=buffer.embeds[:bucket], mask=buffer.mask[:bucket],
                          positions=buffer.positions[:bucket], lods=buffer.lods[:bucket],
                          token_ids=buffer.token_ids[:bucket], length=n, bucket=bucket)


def gather_batched(levels: list[Tensor], wcs: list[TiledContext], bucket: int, *,
                   token_ids: Tensor | None = None) -> dict:
    """Training gather: B*V working contexts over B sequences' levels, one differentiable gather.

    ``levels``: from :func:`mc.tree.gist_levels`, ``[B, N_L, D]`` per level. Row ``r`` of
    ``wcs`` belongs to sequence ``r // V`` (``V = len(wcs) // B``). ``token_ids [B, T]``
    (optional, keyword) fills the ``token_ids`` of LOD0 entries; without it the ``token_ids``
    value is None (levels hold embeddings only). ``token_index`` ([R, bucket] long) is the token
    position of each LOD0 entry, -1 for gists and padding.

    Returns ``embeds [R, bucket, D]``, ``mask``, ``positions``, ``lods``, ``token_ids``,
    ``token_index`` ([R, bucket]) and ``lengths [R]``. The index tables are built on the host
    (:func:`mc.gather.gather_tables`), then moved; the embedding gather is one ``index_select``
    over the concatenated level tables plus a zero row for padding (:func:`mc.gather.gather_planned`).
    """
    if not levels or any(not isinstance(l, Tensor) or l.dim() != 3 for l in levels):
        raise ValueError("gather_batched: levels must be a non-empty list of [B, N_L, D] tensors")
    B, T, D = levels[0].shape
    K = wcs[0].block_size if wcs else 2
    for lod, l in enumerate(levels):
        if l.shape[0] != B or l.shape[2] != D or l.shape[1] != T // K**lod:
            raise ValueError(f"gather_batched: level {lod} has shape {tuple(l.shape)}, expected [{B}, {T // K**lod}, {D}]")
    tables = gather_tables(wcs, batch=B, tokens=T, max_lod=len(levels) - 1, bucket=bucket)
    dev = levels[0].device
    t = {k: v.to(dev) for k, v in tables.items() if k != "lod_map"}
    embeds, mask = gather_planned(levels, t["index"], t["lengths"])
    ids = None
    if token_ids is not None:
        if tuple(token_ids.shape) != (B, T):
            raise ValueError(f"gather_batched: token_ids must be [B, T] = [{B}, {T}], got {tuple(token_ids.shape)}")
        ids = token_ids_of(token_ids, t["token_index"], len(wcs) // B)
    return {"embeds": embeds, "mask": mask, "positions": t["positions"], "lods": t["lods"], "token_ids": ids,
            "token_index": t["token_index"], "lengths": t["lengths"]}
