"""The working context (WC): which tree nodes the base model reads, as an ordered list of entries.

Owns the WC data structure and its invariants (obsidian "Design", "Working Context"), its legal
edits (expand, collapse, append, growing a level) and the layout arithmetic of how many entries a
history needs (:func:`coarsest_size`, :func:`layout_depth`, :func:`capacity_tokens`). Turning a WC
into tensors lives in :mod:`mc.materialize` (re-exported here for existing imports).

An entry is ``(lod, index)``: node ``index`` of level ``lod``, covering tokens
``[index*K**lod, (index+1)*K**lod)``. Invariants, checked by :meth:`WorkingContext.validate`:

- tiling: the entries cover ``[0, num_tokens)`` exactly once, in time order;
- alignment / existence: ``0 <= lod <= max_lod`` and the node's block is complete
  (``end <= num_tokens``); an LOD-L entry starts at a multiple of K**L by construction, collapse
  only merges the K children of one parent and expand replaces a node by exactly its K children;
- recent tail: the last ``recent_tokens`` tokens are LOD0 (no gist reaches past ``tail_start``);
- budget: ``len(entries) <= max_entries``.

Depth: ``max_lod`` is the deepest level the WC may use. An inference session starts it at
``mc.max_lod`` and raises it (:meth:`WorkingContext.grow_level`, together with the tree) when the
history no longer fits the budget at the current depth, so a session's capacity is set by the
budget alone: every history of up to :func:`capacity_tokens` tokens fits (see obsidian "Working
Context").

Positions: an entry sits at the centre of its span, ``start + (width - 1) / 2``. A gist summarises
its whole span symmetrically, so the centre is the least-biased single position for it, and for
LOD0 (width 1) the formula collapses to the token index itself, so LOD0 entries get exactly the
base model's ordinary positions (see the [[Positions]] note; ``mc.positions`` maps them for the
base model).
"""
from __future__ import annotations

from typing import Sequence

import torch

from mc.materialize import MaterializedWC, WCBuffer, bucket_for, gather_batched, materialize  # noqa: F401 (re-export)

Entry = tuple[int, int]  # (lod, node index)


def coarsest_size(num_tokens: int, *, block_size: int, max_lod: int, recent_tokens: int) -> int:
    """Entries of the coarsest legal layout of ``num_tokens`` at depth ``max_lod``, in O(max_lod).

    The LOD0 tail, plus the greedy aligned cover of ``[0, tail_start)``: ``tail // K**max_lod`` top
    nodes, then one node per unit of each base-K digit of the remainder. No legal layout is smaller
    (it is what :meth:`WorkingContext.build` makes with ``fill=False``)."""
    K = block_size
    tail = max(0, num_tokens - recent_tokens)
    n, rest = divmod(tail, K**max_lod)
    while rest:
        rest, digit = divmod(rest, K)
        n += digit
    return n + num_tokens - tail


def capacity_tokens(*, block_size: int, max_entries: int, recent_tokens: int) -> int:
    """The longest history such that every history up to it fits the budget (at a large enough depth).

    With unlimited depth the coarsest layout needs the tail plus the base-K digit sum of
    ``tail_start``; the smallest ``tail_start`` whose digit sum exceeds ``B = max_entries - recent_tokens``
    is ``(r + 2) * K**q - 1`` with ``q, r = divmod(B, K - 1)``. Sessions refuse longer histories, so
    the set of accepted lengths is exactly ``[1, capacity]`` (monotonic)."""
    K = block_size
    q, r = divmod(max_entries - recent_tokens, K - 1)
    return recent_tokens + (r + 2) * K**q - 2


def layout_depth(num_tokens: int, *, block_size: int, min_lod: int, max_entries: int, recent_tokens: int,
                 room: int = 0) -> int:
    """The smallest depth ``>= min_lod`` whose coarsest layout of ``num_tokens`` fits ``max_entries``, then
    deeper while that layout leaves fewer than ``room`` entries free and one more level would free some.

    Why ``room``: at the trained depth a long history's coarsest layout can take nearly the whole budget
    (8192 tokens in 72 entries at K = 8, depth 3: 44 entries), leaving too few for a refocus to open a
    path to LOD0; one level more merges the oldest top-level gists K to one and frees ``K - 1`` entries per
    merged group (obsidian Working Context, "Room for focus"). A level is added only where the current top
    level has at least K nodes before the tail, so the loop ends.

    ValueError (naming the capacity and the fix) past :func:`capacity_tokens`, even for the rare
    longer lengths whose digit sum happens to fit again: a stream that broke at one length must not
    be accepted at a later one, so the accepted lengths are exactly ``[1, capacity]``."""
    kw = dict(block_size=block_size, recent_tokens=recent_tokens)
    cap = capacity_tokens(max_entries=max_entries, **kw)
    if num_tokens > cap:
        raise ValueError(
            f"a history of {num_tokens} tokens is past the working-context budget's capacity: max_entries="
            f"{max_entries} holds a {recent_tokens}-token LOD0 tail plus up to K-1={block_size - 1} aligned nodes per "
            f"level before it, which covers every history of up to {cap} tokens; raise mc.max_entries or lower "
            "mc.recent_tokens")
    lod = min_lod
    while coarsest_size(num_tokens, max_lod=lod, **kw) > max_entries:
        lod += 1  # terminates: within the capacity some depth fits (see capacity_tokens)
    tail = max(0, num_tokens - recent_tokens)
    while (room and tail >= block_size ** (lod + 1)  # cheap tests first: this runs on every decoded token
           and coarsest_size(num_tokens, max_lod=lod, **kw) > max_entries - room):
        lod += 1
    return lod


def _coarse_cover(start: int, end: int, K: int, max_lod: int) -> list[Entry]:
    """Greedy cover of tokens ``[start, end)``: at each position the coarsest aligned node (lod <=
    max_lod) that ends by ``end``. Minimal in entries; O(entries) steps."""
    entries: list[Entry] = []
    pos = start
    while pos < end:
        lod = max_lod
        while lod > 0 and (pos % K**lod or pos + K**lod > end):
            lod -= 1
        entries.append((lod, pos // K**lod))
        pos += K**lod
    return entries


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
        need = coarsest_size(num_tokens, block_size=K, max_lod=max_lod, recent_tokens=recent_tokens)
        if need > max_entries:  # checked before building: a long history at a shallow depth has many nodes
            raise ValueError(
                f"WorkingContext.build: even the coarsest layout of {num_tokens} tokens needs {need} "
                f"entries (LOD0 tail of {num_tokens - tail}, max_lod={max_lod}, K={K}) > max_entries={max_entries}; "
                "raise max_entries or max_lod, or lower recent_tokens (a session grows max_lod itself)"
            )
        entries = _coarse_cover(0, tail, K, max_lod) + [(0, t) for t in range(tail, num_tokens)]
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

    def overlap_mask(self, start: int, end: int) -> torch.Tensor:
        """``[len(self)]`` float: 1.0 for entries covering any token of ``[start, end)``, 0.0 elsewhere."""
        return torch.tensor([float(lo < end and start < hi) for lo, hi in map(self.span, range(len(self)))])

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

    def collapsible(self) -> list[int]:
        """Every ``i`` with ``check_collapse(i) is None``, in order, in one pass and without building the
        reasons: the allocator asks this of every entry on each make-room and refocus (a decode step's host time)."""
        K, e, n = self.block_size, self._entries, len(self._entries)
        tail = self.tail_start()
        out = []
        for i in range(n - K + 1):
            lod, idx = e[i]
            if lod >= self.max_lod or idx % K or (idx + K) * K**lod > tail:
                continue
            if all(e[i + j] == (lod, idx + j) for j in range(1, K)):
                out.append(i)
        return out

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

    def append_tokens(self, n: int, *, over_budget: bool = False) -> None:
        """Add ``n`` new tokens at the end (``num_tokens += n``).

        Tokens that stay inside the new recent tail enter as LOD0 entries; tokens that an append
        longer than the tail pushes past it at once enter as the coarsest aligned nodes (the tree
        must already hold them), so a long chunk adds O(depth * K) entries, not O(n). ValueError over
        budget, unless ``over_budget``: then the entries go in anyway and the caller must make room
        next (``FocusAllocator.make_room(wc, 0)``); sessions do this so that the sibling groups the
        new tokens make collapsible (the tail moved) are available (see obsidian "Working Context")."""
        if not isinstance(n, int) or n < 0:
            raise ValueError(f"append_tokens: n must be an integer >= 0, got {n!r}")
        old, new = self.num_tokens, self.num_tokens + n
        tail = max(old, new - self.recent_tokens)
        added = _coarse_cover(old, tail, self.block_size, self.max_lod) + [(0, t) for t in range(tail, new)]
        if not over_budget and len(self._entries) + len(added) > self.max_entries:
            raise ValueError(f"append_tokens({n}) breaks the budget: {len(self._entries)} + {len(added)} entries > "
                             f"max_entries={self.max_entries}; collapse first (FocusAllocator.make_room)")
        # The tail start only moves forward, so existing gists stay outside the tail.
        self._entries.extend(added)
        self.num_tokens = new

    def grow_level(self) -> None:
        """Allow one more level of detail (``max_lod += 1``): the K aligned top-level siblings become
        collapsible. The tree must gain the level too (``LifetimeGistTree.grow_level``)."""
        self.max_lod += 1
