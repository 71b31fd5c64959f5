"""The train/val split rule and corpus fingerprints, shared by every file-backed source.

A document belongs to the validation split when a stable hash of its *key* (a path relative to
the corpus root, plus ``#row`` for JSONL lines / parquet rows) falls below ``val_fraction``.
sha256 (not Python's salted ``hash``) keeps the split identical across runs, processes and
machines, and adding or removing other files never moves a document between splits.
"""
from __future__ import annotations

import hashlib
from typing import Iterable, Sequence

SPLITS = ("train", "val")
# Fixed-seed draws from the validation split (stage-1 validation batches, the evaluation's document
# windows) use a generator seeded with train.seed + this, so they never repeat the training draws.
VAL_SEED_OFFSET = 7919


def stable_fraction(key: str) -> float:
    """A number in [0, 1) fixed by ``key`` alone (first 8 bytes of its sha256)."""
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def is_val(key: str, val_fraction: float) -> bool:
    """True when ``key`` falls in the validation split."""
    return stable_fraction(key) < val_fraction


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is invalid: expected one of {', '.join(SPLITS)}")


def check_val_fraction(val_fraction: float) -> None:
    if not isinstance(val_fraction, (int, float)) or not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction={val_fraction!r} is invalid: expected a number in (0, 1)")


def split_indices(keys: Sequence[str], val_fraction: float) -> tuple[list[int], list[int]]:
    """Indices of ``keys`` in (train, val); disjoint and together complete, order preserved."""
    check_val_fraction(val_fraction)
    train, val = [], []
    for i, key in enumerate(keys):
        (val if is_val(key, val_fraction) else train).append(i)
    return train, val


def fingerprint(entries: Iterable[tuple[str, bytes]]) -> dict:
    """``{file_count, bytes, sha256}`` over (key, size, content) of each entry, in the given order."""
    h = hashlib.sha256()
    count = total = 0
    for key, data in entries:
        count += 1
        total += len(data)
        h.update(key.encode("utf-8") + b"\0" + str(len(data)).encode() + b"\0")
        h.update(hashlib.sha256(data).digest())
    return {"file_count": count, "bytes": total, "sha256": h.hexdigest()}
