"""A lazily read, indexable set of documents, split by the stable rule of :mod:`mc.data.split`.

Each document is a key (its split/fingerprint identity) plus raw UTF-8 bytes. Sizes are known
up front (``stat`` for files) so a token stream can place windows without reading anything;
contents are read when a window touches them and kept in a small LRU cache. A document's
tokens are ``[BOS] + bytes + [EOS]``, so documents concatenate stream-style with separators.
"""
from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Callable, Sequence

import torch
from torch import Tensor

from mc.config import BOS_ID, EOS_ID
from mc.data.split import check_split, fingerprint, split_indices


class DocumentSet:
    """Documents ``0..n-1`` with ``keys[i]``, ``sizes[i]`` (bytes) and ``read(i) -> bytes``."""

    def __init__(self, keys: Sequence[str], sizes: Sequence[int], read: Callable[[int], bytes], *,
                 name: str, cache_docs: int = 64, tokenizer=None):
        if len(keys) != len(sizes):
            raise ValueError(f"{len(keys)} keys but {len(sizes)} sizes; they must match")
        self.keys = list(keys)
        self.sizes = [int(s) for s in sizes]
        self._read = read
        self.name = name
        self._cache: OrderedDict[int, Tensor] = OrderedDict()
        self._cache_docs = cache_docs
        # None = bytes. Another tokenizer (model=hf) encodes a document when it is first read, so
        # num_tokens stays the byte count + 2: a size to place windows by, not the encoded length.
        self.tokenizer = None if tokenizer is None or tokenizer.byte_level else tokenizer

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_paths(cls, paths: Sequence[Path], keys: Sequence[str], *, name: str, tokenizer=None) -> "DocumentSet":
        paths = [Path(p) for p in paths]
        sizes = [p.stat().st_size for p in paths]

        def read(i: int) -> bytes:
            data = paths[i].read_bytes()
            if len(data) != sizes[i]:
                raise RuntimeError(f"{paths[i]} changed size while the corpus was open "
                                   f"({sizes[i]} -> {len(data)} bytes); restart the run")
            return data
        return cls(keys, sizes, read, name=name, tokenizer=tokenizer)

    @classmethod
    def from_texts(cls, keys: Sequence[str], texts: Sequence[str], *, name: str, tokenizer=None) -> "DocumentSet":
        blobs = [t.encode("utf-8") for t in texts]
        return cls(keys, [len(b) for b in blobs], blobs.__getitem__, name=name, tokenizer=tokenizer)

    # ------------------------------------------------------------------ access
    def __len__(self) -> int:
        return len(self.keys)

    def read_bytes(self, i: int) -> bytes:
        return self._read(i)

    def num_tokens(self, i: int) -> int:
        """BOS + bytes + EOS: the exact length for bytes; for another tokenizer, the size windows are placed by."""
        return self.sizes[i] + 2

    def tokens(self, i: int) -> Tensor:
        """``[BOS] + bytes + [EOS]`` of document ``i`` as a LongTensor ``[sizes[i] + 2]`` (with a
        tokenizer: ``[BOS] + its encoding of the UTF-8 text + [EOS]``)."""
        hit = self._cache.get(i)
        if hit is not None:
            self._cache.move_to_end(i)
            return hit
        data = self._read(i)
        if self.tokenizer is not None:
            t = self.tokenizer
            out = torch.tensor([t.bos_id, *t.encode_body(data.decode("utf-8", errors="replace")), t.eos_id], dtype=torch.long)
            return self._remember(i, out)
        out = torch.empty(len(data) + 2, dtype=torch.long)
        out[0] = BOS_ID
        out[-1] = EOS_ID
        if data:
            out[1:-1] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        return self._remember(i, out)

    def _remember(self, i: int, out: Tensor) -> Tensor:
        self._cache[i] = out
        if len(self._cache) > self._cache_docs:
            self._cache.popitem(last=False)
        return out

    def subset(self, indices: Sequence[int], *, name: str) -> "DocumentSet":
        idx = list(indices)
        read = self._read
        return DocumentSet([self.keys[i] for i in idx], [self.sizes[i] for i in idx],
                           lambda j: read(idx[j]), name=name, cache_docs=self._cache_docs, tokenizer=self.tokenizer)

    def split(self, split: str, val_fraction: float) -> "DocumentSet":
        """The ``split`` ("train"/"val") part; ValueError when it would be empty."""
        check_split(split)
        train, val = split_indices(self.keys, val_fraction)
        idx = train if split == "train" else val
        if not idx:
            raise ValueError(
                f"the {split} split of corpus {self.name!r} is empty ({len(self)} documents, "
                f"val_fraction={val_fraction}); add more documents or change data.val_fraction")
        return self.subset(idx, name=f"{self.name}:{split}")

    def total_bytes(self) -> int:
        return sum(self.sizes)

    def fingerprint(self) -> dict:
        """``{file_count, bytes, sha256}`` over (key, size, content), in sorted key order."""
        order = sorted(range(len(self)), key=self.keys.__getitem__)
        return fingerprint((self.keys[i], self._read(i)) for i in order)
