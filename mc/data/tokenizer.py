"""Byte-level tokenizer: ids 0..255 are UTF-8 bytes, then BOS/EOS/PAD from :mod:`mc.config`.

Bytes need no vocabulary file and no download, and every string round-trips exactly. Specials
are never produced from text: ``encode`` adds BOS/EOS only when asked, ``decode`` drops them.
"""
from __future__ import annotations

from typing import Iterable

import torch
from torch import Tensor

from mc.config import BOS_ID, BYTE_VOCAB_SIZE, EOS_ID, PAD_ID

SPECIAL_IDS = (BOS_ID, EOS_ID, PAD_ID)


class ByteTokenizer:
    """UTF-8 bytes as token ids; ``vocab_size`` = 256 bytes + 3 specials."""

    vocab_size = BYTE_VOCAB_SIZE
    byte_level = True  # one token per byte: the data code keeps its byte fast paths
    bos_id = BOS_ID
    eos_id = EOS_ID
    pad_id = PAD_ID

    def encode(self, text: str, bos: bool = True, eos: bool = False) -> list[int]:
        """``text`` -> [BOS?] + utf-8 bytes + [EOS?]."""
        if not isinstance(text, str):
            raise TypeError(f"encode expects a str, got {type(text).__name__}; decode bytes first")
        ids = list(text.encode("utf-8"))
        if bos:
            ids.insert(0, BOS_ID)
        if eos:
            ids.append(EOS_ID)
        return ids

    def encode_body(self, text: str) -> list[int]:
        """``text`` -> utf-8 bytes, no specials (the interface shared with mc.data.hf_tokenizer)."""
        return self.encode(text, bos=False)

    def encode_prompt(self, text: str) -> list[int]:
        """A prompt for generation: ``[BOS] + bytes`` (the interface shared with mc.data.hf_tokenizer)."""
        return self.encode(text, bos=True)

    def char_ids(self, text: str) -> list[int]:
        """One token per character: ASCII only (the generated tasks' keys, values and separators)."""
        ids = self.encode_body(text)
        if len(ids) != len(text):
            raise ValueError(f"{text!r} is not ASCII: the byte tokenizer gives one token per character only for ASCII")
        return ids

    def encode_tensor(self, text: str, bos: bool = True, eos: bool = False) -> Tensor:
        """Like :meth:`encode` but returns a LongTensor ``[n]``."""
        return torch.tensor(self.encode(text, bos=bos, eos=eos), dtype=torch.long)

    def decode(self, ids: Iterable[int] | Tensor) -> str:
        """Bytes back to text; specials are skipped, invalid UTF-8 becomes U+FFFD."""
        if isinstance(ids, Tensor):
            if ids.dim() != 1:
                raise ValueError(f"decode expects a 1-D tensor of ids, got shape {tuple(ids.shape)}; decode rows one by one")
            ids = ids.tolist()
        out = bytearray()
        for i in ids:
            i = int(i)
            if 0 <= i < 256:
                out.append(i)
            elif i in SPECIAL_IDS:
                continue
            else:
                raise ValueError(f"token id {i} is outside the byte vocabulary [0, {BYTE_VOCAB_SIZE})")
        return out.decode("utf-8", errors="replace")


_DEFAULT = ByteTokenizer()


def encode(text: str, bos: bool = True, eos: bool = False) -> list[int]:
    """Module-level shortcut for ``ByteTokenizer().encode``."""
    return _DEFAULT.encode(text, bos=bos, eos=eos)


def decode(ids: Iterable[int] | Tensor) -> str:
    """Module-level shortcut for ``ByteTokenizer().decode``."""
    return _DEFAULT.decode(ids)
