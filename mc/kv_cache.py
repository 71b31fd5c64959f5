"""The base model's static KV cache for one inference session, and its invalidation rule.

Owns the preallocated key/value storage ``[L, 1, H, C, hd]`` (``C`` = the largest bucket of
``mc.bucket_ladder``, so its address never changes and a compiled decode step can write into it)
and the record of what each filled slot holds: the working-context entry ``(lod, index)`` and the
position it was encoded at.

Invalidation rule (see obsidian Inference): slot ``i``'s keys/values depend only on entries
``0..i`` (causal attention), and an entry's embedding is fixed once its tree node exists. So after
any edit of the working context (an append, a refocus, a collapse made to make room), the slots
before the first entry whose ``(lod, index, position)`` differs are still exact, and only the
suffix from there on needs recomputing. The rule compares entry lists, not allocator internals, so
it holds whatever edited the working context.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

SlotKey = tuple[int, int, float]  # (lod, node index, position) of the entry held in one slot


def slot_keys(entries: Sequence[tuple[int, int]], positions: Sequence[float]) -> list[SlotKey]:
    """One key per working-context entry: what a cached slot must match to be reused."""
    return [(lod, idx, pos) for (lod, idx), pos in zip(entries, positions)]


def first_changed(cached: Sequence[SlotKey], current: Sequence[SlotKey]) -> int:
    """Index of the first slot whose entry differs (= the length of the common prefix)."""
    n = min(len(cached), len(current))
    if cached[:n] == current[:n]:  # the decode step's case (two lists), compared in C rather than a Python loop
        return n
    for i in range(n):
        if cached[i] != current[i]:
            return i
    return n


class KVCache:
    """Static keys/values for up to ``capacity`` working-context entries of one session."""

    def __init__(self, n_layers: int, n_heads: int, head_dim: int, capacity: int, *,
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> None:
        for name, v in (("n_layers", n_layers), ("n_heads", n_heads), ("head_dim", head_dim), ("capacity", capacity)):
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"KVCache {name} must be a positive integer, got {v!r}")
        self.capacity = capacity
        self.k = torch.zeros(n_layers, 1, n_heads, capacity, head_dim, device=device, dtype=dtype)  # [L, 1, H, C, hd]
        self.v = torch.zeros_like(self.k)
        self.keys: list[SlotKey] = []  # what slots 0..len-1 hold; later slots are stale
        mark_static = getattr(getattr(torch, "_dynamo", None), "mark_static_address", None)
        if mark_static is not None:  # a fixed address lets a CUDA-graph decode step write into it
            mark_static(self.k)
            mark_static(self.v)

    def __len__(self) -> int:
        return len(self.keys)

    def valid_prefix(self, current: Sequence[SlotKey]) -> int:
        """How many leading slots are still exact for the working context ``current``."""
        if len(current) > self.capacity:
            raise ValueError(f"the working context has {len(current)} entries but the KV cache holds "
                             f"{self.capacity} (the largest bucket); raise mc.bucket_ladder's last value")
        return first_changed(self.keys, current)

    def commit(self, current: Sequence[SlotKey]) -> None:
        """Record that slots ``0..len(current)-1`` now hold ``current`` (after the suffix forward)."""
        self.keys = current if isinstance(current, list) else list(current)  # the caller's fresh list: no copy

    def clear(self) -> None:
        self.keys = []

    def rows(self) -> Tensor:
        """The valid keys ``[L, 1, H, n, hd]`` (a view; for tests and inspection)."""
        return self.k[:, :, :, : len(self.keys)]
