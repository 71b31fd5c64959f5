"""The lifetime gist tree: every token of a sequence's history plus its gists, level by level.

Owns storage and incremental gisting of the history (inference), and the batched fixed-length
equivalent used in training (:func:`gist_levels`).

Structure (obsidian "Design", data model): K-ary with K = ``block_size``; level 0 holds token ids and
their embeddings; node ``i`` of level ``L`` (1 <= L <= max_lod) is the gist of the K nodes
``i*K .. i*K+K-1`` of level ``L-1`` and so covers tokens ``[i*K**L, (i+1)*K**L)``. Only complete
blocks become nodes, so level ``L`` always has ``num_tokens // K**L`` nodes.

Depth: ``max_lod`` is the tree's *current* deepest level. It starts at the configured
``mc.max_lod`` and :meth:`LifetimeGistTree.grow_level` adds one more (the same ``gist_fn`` gists every
level), which an inference session does when the working-context budget can no longer hold the
history at the current depth (see obsidian "Lifetime Gist Tree").

Atomicity: :meth:`LifetimeGistTree.mark` / :meth:`LifetimeGistTree.rollback` restore the tree exactly
as it was (counts, depth, storage), so a failed append leaves no trace.

The gist function is injected (``GistFn``: ``[N, K, D] -> [N, D]``): GistNet in the runtime,
mean pooling in tests. An append gists every block it completes, at every level, with exactly
one batched call per level that gained nodes, never one call per block.

Storage is a preallocated tensor per level whose capacity doubles when full, so appending costs
amortised O(new tokens) copies instead of re-concatenating the whole history per token. The tree
is inference storage: gists are written detached (no autograd history is kept across appends);
training builds differentiable levels with :func:`gist_levels` instead.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

GistFn = Callable[[Tensor], Tensor]  # blocks [N, K, D] -> gists [N, D]


def _check_geometry(block_size: int, max_lod: int) -> None:
    if not isinstance(block_size, int) or block_size < 2:
        raise ValueError(f"block_size must be an integer >= 2 (K entries per gist), got {block_size!r}")
    if not isinstance(max_lod, int) or max_lod < 0:
        raise ValueError(f"max_lod must be an integer >= 0, got {max_lod!r}")


def _check_gists(gists: Tensor, n_blocks: int, dim: int, lod: int) -> None:
    if not isinstance(gists, Tensor) or tuple(gists.shape) != (n_blocks, dim):
        shape = tuple(gists.shape) if isinstance(gists, Tensor) else type(gists).__name__
        raise ValueError(
            f"gist_fn returned {shape} for {n_blocks} blocks of level {lod - 1}; "
            f"it must map [N, K, D] -> [N, D] = [{n_blocks}, {dim}]"
        )


class LifetimeGistTree:
    """Token ids, token embeddings and gists of one growing history (see module docstring)."""

    def __init__(
        self,
        block_size: int,
        max_lod: int,
        dim: int,
        gist_fn: GistFn,
        *,
        device=None,
        dtype: torch.dtype = torch.float32,
        chunk_tokens: int = 4096,
    ) -> None:
        _check_geometry(block_size, max_lod)
        if not isinstance(dim, int) or dim <= 0:
            raise ValueError(f"dim must be a positive integer (embedding width D), got {dim!r}")
        if not isinstance(chunk_tokens, int) or chunk_tokens <= 0:
            raise ValueError(f"chunk_tokens must be a positive integer, got {chunk_tokens!r}")
        if not callable(gist_fn):
            raise ValueError("gist_fn must be callable: [N, K, D] -> [N, D]")
        self.block_size = block_size
        self.max_lod = max_lod
        self.dim = dim
        self.gist_fn = gist_fn
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.dtype = dtype
        K = block_size
        # Initial capacities: chunk_tokens tokens, and the matching number of nodes per level.
        caps = [max(1, chunk_tokens // K**lod) for lod in range(max_lod + 1)]
        self._levels: list[Tensor] = [torch.zeros(c, dim, device=self.device, dtype=dtype) for c in caps]
        self._ids = torch.full((caps[0],), 0, dtype=torch.long, device=self.device)
        self._counts = [0] * (max_lod + 1)  # filled rows per level

    # ------------------------------------------------------------------ queries

    @property
    def num_tokens(self) -> int:
        return self._counts[0]

    def num_nodes(self, lod: int) -> int:
        self._check_lod(lod)
        return self._counts[lod]

    def level(self, lod: int) -> Tensor:
        """[num_nodes(lod), D] view of level ``lod`` (level 0 = token embeddings)."""
        self._check_lod(lod)
        return self._levels[lod][: self._counts[lod]]

    def levels(self) -> list[Tensor]:
        """All levels, finest first (views)."""
        return [self.level(lod) for lod in range(self.max_lod + 1)]

    def token_ids(self) -> Tensor:
        """[num_tokens] long view of the token ids."""
        return self._ids[: self._counts[0]]

    def capacity(self, lod: int) -> int:
        """Rows currently allocated for level ``lod`` (grows by doubling)."""
        self._check_lod(lod)
        return self._levels[lod].shape[0]

    def node_span(self, lod: int, index: int) -> tuple[int, int]:
        """Token span ``[start, end)`` of node ``index`` of level ``lod``; the node must exist."""
        self._check_lod(lod)
        if not 0 <= index < self._counts[lod]:
            raise ValueError(
                f"node (lod={lod}, index={index}) does not exist: level {lod} has {self._counts[lod]} "
                f"complete nodes for {self.num_tokens} tokens"
            )
        w = self.block_size**lod
        return index * w, (index + 1) * w

    def mark(self) -> tuple:
        """An O(depth) snapshot for :meth:`rollback`: fill counts, depth and the storage tensors.

        Appends only write rows past the filled counts (or into freshly allocated storage), so
        restoring the counts and the tensor references restores every visible value exactly."""
        return (list(self._counts), list(self._levels), self._ids, self.max_lod)

    def rollback(self, mark: tuple) -> None:
        """Return to the state :meth:`mark` recorded (drops levels grown and tokens appended since)."""
        counts, levels, ids, max_lod = mark
        self._counts, self._levels, self._ids, self.max_lod = list(counts), list(levels), ids, max_lod

    def _check_lod(self, lod: int) -> None:
        if not isinstance(lod, int) or not 0 <= lod <= self.max_lod:
            raise ValueError(f"lod must be an integer in [0, {self.max_lod}], got {lod!r}")

    # ------------------------------------------------------------------ growth

    def _reserve(self, lod: int, rows: int) -> None:
        """Make room for ``rows`` filled rows in level ``lod`` by doubling its capacity."""
        buf = self._levels[lod]
        cap = buf.shape[0]
        if rows <= cap:
            return
        while cap < rows:
            cap *= 2
        new = torch.zeros(cap, self.dim, device=self.device, dtype=self.dtype)
        new[: self._counts[lod]] = buf[: self._counts[lod]]
        self._levels[lod] = new
        if lod == 0:
            ids = torch.zeros(cap, dtype=torch.long, device=self.device)
            ids[: self._counts[0]] = self._ids[: self._counts[0]]
            self._ids = ids

    @torch.no_grad()
    def grow_level(self) -> int:
        """Add level ``max_lod + 1``, gisting every complete block of the current top level in one
        ``gist_fn`` call; returns the new level's node count. Later appends keep it up to date."""
        K, top = self.block_size, self.max_lod
        n_new = self._counts[top] // K
        cap = max(1, self._levels[top].shape[0] // K)
        level = torch.zeros(max(cap, n_new), self.dim, device=self.device, dtype=self.dtype)
        if n_new:
            blocks = self._levels[top][: n_new * K].reshape(n_new, K, self.dim)  # [N, K, D]
            gists = self.gist_fn(blocks)  # [N, D]
            _check_gists(gists, n_new, self.dim, top + 1)
            level[:n_new] = gists.detach().to(self.device, self.dtype)
        self._levels.append(level)
        self._counts.append(n_new)
        self.max_lod = top + 1
        return n_new

    @torch.no_grad()
    def append(self, token_ids: Tensor, token_embeds: Tensor) -> dict[int, int]:
        """Append ``n`` tokens (``token_ids [n]`` long, ``token_embeds [n, D]``).

        Gists every block the append completes, at every level, with one ``gist_fn`` call per
        level that gained nodes. Returns ``{lod: new nodes}`` for every lod in 1..max_lod.
        """
        if not isinstance(token_ids, Tensor) or token_ids.dim() != 1:
            raise ValueError(f"token_ids must be a 1-D tensor [n], got {getattr(token_ids, 'shape', token_ids)!r}")
        if token_ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
            raise ValueError(f"token_ids must be an integer tensor, got dtype {token_ids.dtype}")
        n = token_ids.shape[0]
        if not isinstance(token_embeds, Tensor) or tuple(token_embeds.shape) != (n, self.dim):
            raise ValueError(
                f"token_embeds must be [n, D] = [{n}, {self.dim}] to match token_ids, "
                f"got {tuple(getattr(token_embeds, 'shape', ()))}"
            )
        new_nodes = {lod: 0 for lod in range(1, self.max_lod + 1)}
        if n == 0:
            return new_nodes
        mark = self.mark()
        try:  # all or nothing: a gist_fn that raises (or returns a bad shape) leaves the tree as it was
            self._append(token_ids, token_embeds, new_nodes)
        except BaseException:
            self.rollback(mark)
            raise
        return new_nodes

    def _append(self, token_ids: Tensor, token_embeds: Tensor, new_nodes: dict[int, int]) -> None:
        n = token_ids.shape[0]
        old = self._counts[0]
        self._reserve(0, old + n)
        self._levels[0][old : old + n] = token_embeds.detach().to(self.device, self.dtype)
        self._ids[old : old + n] = token_ids.to(self.device, torch.long)
        self._counts[0] = old + n
        K = self.block_size
        for lod in range(1, self.max_lod + 1):
            have = self._counts[lod]
            want = self._counts[lod - 1] // K  # complete blocks of the level below
            if want == have:
                break  # no new node here means none above either
            n_new = want - have
            # The children of the new nodes are contiguous rows of the level below.
            blocks = self._levels[lod - 1][have * K : want * K].reshape(n_new, K, self.dim)  # [N, K, D]
            gists = self.gist_fn(blocks)  # [N, D]
            _check_gists(gists, n_new, self.dim, lod)
            self._reserve(lod, want)
            self._levels[lod][have:want] = gists.detach().to(self.device, self.dtype)
            self._counts[lod] = want
            new_nodes[lod] = n_new


def gist_levels(token_embeds_btd: Tensor, block_size: int, max_lod: int, gist_fn: GistFn) -> list[Tensor]:
    """Batched, fixed-length tree levels for training (differentiable through ``gist_fn``).

    ``token_embeds_btd [B, T, D]`` -> ``[level0 [B, T, D], level1 [B, T/K, D], ...,
    level_max_lod [B, T/K**max_lod, D]]``. T must be a multiple of ``K**max_lod``. One ``gist_fn``
    call per level with ``N = B * T / K**L`` blocks; level L is built from level L-1 exactly as
    :class:`LifetimeGistTree` does, so both give the same values.
    """
    _check_geometry(block_size, max_lod)
    if not isinstance(token_embeds_btd, Tensor) or token_embeds_btd.dim() != 3:
        raise ValueError(f"token_embeds_btd must be [B, T, D], got {tuple(getattr(token_embeds_btd, 'shape', ()))}")
    B, T, D = token_embeds_btd.shape
    top = block_size**max_lod
    if T % top:
        raise ValueError(f"T={T} must be a multiple of block_size**max_lod = {top} (pad or crop the history)")
    levels = [token_embeds_btd]
    for lod in range(1, max_lod + 1):
        prev = levels[-1]  # [B, N_prev, D]
        n = prev.shape[1] // block_size
        gists = gist_fn(prev.reshape(B * n, block_size, D))  # [B*n, D]
        _check_gists(gists, B * n, D, lod)
        levels.append(gists.reshape(B, n, D))
    return levels
