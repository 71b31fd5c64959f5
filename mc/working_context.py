"""The working context (WC): which tree nodes the base model reads, and their materialisation.

Owns the WC data structure and its invariants (obsidian "Design", "Working Context"), its legal
edits (expand, collapse, append), and turning it into tensors: :func:`materialize` for one sequence
at inference (into a preallocated :class:`WCBuffer`), :func:`gather_batched` for training.

An entry is ``(lod, index)``: node ``index`` of level ``lod``, covering tokens
``[index*K**lod, (index+1)*K**lod)``. Invariants, checked by :meth:`WorkingContext.validate`:

- tiling: the entries cover ``[0, num_tokens)`` exactly once, in time order;
- alignment / existence: ``0 <= lod <= max_lod`` and the node's block is complete
  (``end <= num_tokens``); an LOD-L entry starts at a multiple of K**L by construction, collapse
  only merges the K children of one parent and expand replaces a node by exactly its K children;
- recent tail: the last ``recent_tokens`` tokens are LOD0 (no gist reaches past ``tail_start``);
- budget: ``len(entries) <= max_entries``.

Positions: an entry sits at the centre of its span, ``start + (width - 1) / 2``. A gist summarises
its whole span symmetrically, so the centre is the least-biased single position for it, and for
LOD0 (width 1) the formula collapses to the token index itself, so LOD0 entries get exactly the
base model's ordinary positions (see the [[Positions]] note).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor

from mc.config import PAD_ID
from mc.gather import gather_planned, gather_tables, token_ids_of
from mc.tree import LifetimeGistTree

Entry = tuple[int, int]  # (lod, node index)


class WorkingContext:
    """An ordered list of tree nodes tiling a history, with the section-2 invariants."""

    def __init__(
        self,
        entries: Sequence[tuple[int, int]],
        num_tokens: int,
        *,
        block_size: int,
        max_lod: int,
        max_entries: int,
        recent_tokens: int,
    ) -> None:
        for name, v, lo in (("block_size", block_size, 2), ("max_lod", max_lod, 0), ("max_entries", max_entries, 1),
                            ("recent_tokens", recent_tokens, 0), ("num_tokens", num_tokens, 0)):
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                raise ValueError(f"WorkingContext {name} must be an integer >= {lo}, got {v!r}")
        self.block_size = block_size
        self.max_lod = max_lod
        self.max_entries = max_entries
        self.recent_tokens = recent_tokens
        self.num_tokens = num_tokens
        self._entries: list[Entry] = []
        for e in entries:
            try:
                lod, idx = e
            except (TypeError, ValueError):
                raise ValueError(f"WorkingContext entry {e!r} must be a (lod, index) pair") from None
            if not all(isinstance(x, int) and not isinstance(x, bool) for x in (lod, idx)):
                raise ValueError(f"WorkingContext entry {e!r} must hold two integers (lod, index)")
            self._entries.append((lod, idx))
        self.validate()

    # ------------------------------------------------------------------ construction

    @classmethod
    def build(
        cls,
        num_tokens: int,
        *,
        block_size: int,
        max_lod: int,
        max_entries: int,
        recent_tokens: int,
        fill: bool = True,
    ) -> "WorkingContext":
        """Recent tail at LOD0, older history covered by the coarsest complete aligned nodes.

        With ``fill``, the newest gist is then expanded repeatedly while the budget allows, which
        grades detail by recency (newest history finest). Raises ValueError if even the coarsest
        layout exceeds ``max_entries``.
        """
        K = block_size
        tail = max(0, num_tokens - recent_tokens)
        entries: list[Entry] = []
        pos = 0
        while pos < tail:
            lod = max_lod
            # Coarsest node starting at pos that is aligned and ends before the LOD0 tail.
            while lod > 0 and (pos % K**lod or pos + K**lod > tail):
                lod -= 1
            entries.append((lod, pos // K**lod))
            pos += K**lod
        entries.extend((0, t) for t in range(tail, num_tokens))
        if len(entries) > max_entries:
            raise ValueError(
                f"WorkingContext.build: even the coarsest layout of {num_tokens} tokens needs {len(entries)} "
                f"entries (LOD0 tail of {num_tokens - tail}, max_lod={max_lod}, K={K}) > max_entries={max_entries}; "
                "raise max_entries or max_lod, or lower recent_tokens"
            )
        wc = cls(entries, num_tokens, block_size=K, max_lod=max_lod, max_entries=max_entries,
                 recent_tokens=recent_tokens)
        if fill:
            while len(wc) + K - 1 <= max_entries:
                newest_gist = next((i for i in range(len(wc) - 1, -1, -1) if wc._entries[i][0] > 0), None)
                if newest_gist is None:
                    break
                wc.expand(newest_gist)
        return wc

    def copy(self) -> "WorkingContext":
        new = object.__new__(WorkingContext)
        new.__dict__.update(self.__dict__)
        new._entries = list(self._entries)
        return new

    # ------------------------------------------------------------------ queries

    @property
    def entries(self) -> list[Entry]:
        """A copy of the entries (edit through expand/collapse/append_tokens only)."""
        return list(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, i: int) -> Entry:
        return self._entries[i]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WorkingContext):
            return NotImplemented
        return (self._entries, self.num_tokens, self.block_size, self.max_lod, self.max_entries,
                self.recent_tokens) == (other._entries, other.num_tokens, other.block_size, other.max_lod,
                                        other.max_entries, other.recent_tokens)

    __hash__ = None  # mutable

    def __repr__(self) -> str:
        return (f"WorkingContext(len={len(self)}, num_tokens={self.num_tokens}, K={self.block_size}, "
                f"max_lod={self.max_lod}, max_entries={self.max_entries}, recent_tokens={self.recent_tokens})")

    def span(self, i: int) -> tuple[int, int]:
        lod, idx = self._entries[i]
        w = self.block_size**lod
        return idx * w, (idx + 1) * w

    def tail_start(self) -> int:
        """First token of the recent tail (tokens from here on must be LOD0)."""
        return max(0, self.num_tokens - self.recent_tokens)

    def lods(self) -> list[int]:
        return [lod for lod, _ in self._entries]

    def starts(self) -> list[int]:
        K = self.block_size
        return [idx * K**lod for lod, idx in self._entries]

    def widths(self) -> list[int]:
        K = self.block_size
        return [K**lod for lod, _ in self._entries]

    def positions(self) -> list[float]:
        """Span centre per entry, ``start + (width-1)/2`` (LOD0: the token index exactly)."""
        K = self.block_size
        return [idx * K**lod + (K**lod - 1) / 2 for lod, idx in self._entries]

    def lod_map(self) -> Tensor:
        """[num_tokens] long: the LOD of the entry covering each token."""
        return torch.repeat_interleave(torch.tensor(self.lods(), dtype=torch.long),
                                       torch.tensor(self.widths(), dtype=torch.long))

    # ------------------------------------------------------------------ invariants

    def validate(self) -> None:
        """Raise ValueError naming the first entry that breaks tiling, alignment, tail or budget."""
        K = self.block_size
        tail = self.tail_start()
        pos = 0
        for i, (lod, idx) in enumerate(self._entries):
            if not 0 <= lod <= self.max_lod:
                raise ValueError(f"entry {i} {(lod, idx)} breaks alignment: lod must be in [0, {self.max_lod}]")
            if idx < 0:
                raise ValueError(f"entry {i} {(lod, idx)} breaks alignment: negative node index")
            start, end = idx * K**lod, (idx + 1) * K**lod
            if start != pos:
                kind = "a gap before it" if start > pos else "an overlap with the previous entry"
                raise ValueError(f"entry {i} {(lod, idx)} breaks tiling: starts at token {start}, expected {pos} "
                                 f"({kind})")
            if end > self.num_tokens:
                raise ValueError(f"entry {i} {(lod, idx)} breaks alignment: its block [{start}, {end}) is not "
                                 f"complete (history has {self.num_tokens} tokens)")
            if lod > 0 and end > tail:
                raise ValueError(f"entry {i} {(lod, idx)} breaks the recent tail: an LOD{lod} gist covers "
                                 f"[{start}, {end}) but tokens from {tail} on must be LOD0")
            pos = end
        if pos != self.num_tokens:
            raise ValueError(f"entries break tiling: they cover [0, {pos}) but the history has "
                             f"{self.num_tokens} tokens")
        if len(self._entries) > self.max_entries:
            raise ValueError(f"entries break the budget: {len(self._entries)} entries > max_entries={self.max_entries}")

    def _check_index(self, i: int, what: str) -> str | None:
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < len(self._entries):
            return f"{what} at index {i!r}: no such entry (the working context has {len(self._entries)} entries)"
        return None

    def check_expand(self, i: int) -> str | None:
        """None if entry ``i`` may be expanded into its K children, else the reason."""
        reason = self._check_index(i, "expand")
        if reason:
            return reason
        lod, idx = self._entries[i]
        if lod == 0:
            return f"expand of entry {i} {(lod, idx)} breaks alignment: an LOD0 token has no children"
        if len(self._entries) + self.block_size - 1 > self.max_entries:
            return (f"expand of entry {i} {(lod, idx)} breaks the budget: {len(self._entries)} + "
                    f"{self.block_size - 1} entries > max_entries={self.max_entries}")
        return None

    def check_collapse(self, i: int) -> str | None:
        """None if entries ``i .. i+K-1`` are the K children of one parent that may replace them."""
        reason = self._check_index(i, "collapse")
        if reason:
            return reason
        K = self.block_size
        lod, idx = self._entries[i]
        if lod >= self.max_lod:
            return f"collapse at entry {i} {(lod, idx)} breaks alignment: LOD{lod} is already max_lod={self.max_lod}"
        if idx % K:
            return (f"collapse at entry {i} {(lod, idx)} breaks alignment: node {idx} is not the first child of a "
                    f"parent (index must be a multiple of K={K})")
        if i + K > len(self._entries):
            return f"collapse at entry {i} {(lod, idx)} breaks alignment: fewer than K={K} entries follow"
        for j in range(1, K):
            if self._entries[i + j] != (lod, idx + j):
                return (f"collapse at entry {i} {(lod, idx)} breaks alignment: entry {i + j} is "
                        f"{self._entries[i + j]}, expected sibling {(lod, idx + j)}")
        end = (idx + K) * K**lod
        if end > self.tail_start():
            return (f"collapse at entry {i} {(lod, idx)} breaks the recent tail: the parent would cover tokens up "
                    f"to {end} but tokens from {self.tail_start()} on must be LOD0")
        return None

    # ------------------------------------------------------------------ edits

    def expand(self, i: int) -> None:
        reason = self.check_expand(i)
        if reason:
            raise ValueError(reason)
        lod, idx = self._entries[i]
        K = self.block_size
        self._entries[i : i + 1] = [(lod - 1, idx * K + j) for j in range(K)]

    def collapse(self, i: int) -> None:
        reason = self.check_collapse(i)
        if reason:
            raise ValueError(reason)
        lod, idx = self._entries[i]
        self._entries[i : i + self.block_size] = [(lod + 1, idx // self.block_size)]

    def append_tokens(self, n: int) -> None:
        """Add ``n`` new LOD0 entries at the end (``num_tokens += n``); ValueError over budget."""
        if not isinstance(n, int) or n < 0:
            raise ValueError(f"append_tokens: n must be an integer >= 0, got {n!r}")
        if len(self._entries) + n > self.max_entries:
            raise ValueError(f"append_tokens({n}) breaks the budget: {len(self._entries)} + {n} entries > "
                             f"max_entries={self.max_entries}; collapse first (FocusAllocator.make_room)")
        # The tail start only moves forward, so existing gists stay outside the tail.
        self._entries.extend((0, t) for t in range(self.num_tokens, self.num_tokens + n))
        self.num_tokens += n


# ---------------------------------------------------------------------- materialisation


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
def materialize(wc: WorkingContext, tree: LifetimeGistTree, buffer: WCBuffer, ladder: Sequence[int]) -> MaterializedWC:
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


def gather_batched(levels: list[Tensor], wcs: list[WorkingContext], bucket: int, *,
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
