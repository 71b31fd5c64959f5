"""The tokenizer of a ``model=hf`` base, with the interface the data loaders and generated tasks use.

Owns: :class:`HFTokenizer` (a ``transformers`` tokenizer loaded from ``model.hf_path``, nothing
downloaded) and :func:`tokenizer_for` (the byte tokenizer for the built-in base, the directory's
tokenizer for ``model=hf``; one instance per path per process).

What the data code needs from a tokenizer (``ByteTokenizer`` has the same members):

* ``bos_id`` / ``eos_id`` / ``pad_id`` / ``vocab_size``; a tokenizer without a BOS token (Qwen2)
  uses its EOS token as the document separator, one without a PAD token uses EOS;
* ``encode_body(text) -> list[int]``: text without specials (documents, filler);
* ``char_ids(text) -> list[int]``: exactly one token per character (the generated tasks' keys,
  values, ``=`` and newlines), so every span of the recall and passkey documents keeps its length
  in tokens whatever the vocabulary; a character that is not one token is a one-line error.

See obsidian Base models and Data.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Iterable

from torch import Tensor

from mc.config import ConfigError, ModelConfig
from mc.data.tokenizer import ByteTokenizer

__all__ = ["HFTokenizer", "tokenizer_for"]


class HFTokenizer:
    """A Hugging Face tokenizer from a local directory (see module docstring)."""

    byte_level = False

    def __init__(self, path: str):
        from mc.nets.hf_load import model_dir  # noqa: PLC0415 - one-line errors for the path

        try:
            from transformers import AutoTokenizer  # noqa: PLC0415 - the hf extra
        except ImportError as exc:
            raise ConfigError("model=hf needs transformers: install the hf extra (pip install -e '.[hf]')") from exc
        p = model_dir(path)
        try:
            self.tok = AutoTokenizer.from_pretrained(str(p), local_files_only=True)
        except (OSError, ValueError, KeyError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise ConfigError(f"model.hf_path={path!r} has no usable tokenizer ({first}); save one next to the model") from exc
        self.path = str(p)
        eos = self.tok.eos_token_id
        if eos is None:
            raise ConfigError(f"the tokenizer at model.hf_path={path!r} has no EOS token; documents need a separator")
        self.eos_id = int(eos)
        self.bos_id = int(self.tok.bos_token_id) if self.tok.bos_token_id is not None else self.eos_id
        self.pad_id = int(self.tok.pad_token_id) if self.tok.pad_token_id is not None else self.eos_id
        self.vocab_size = len(self.tok)
        self._chars: dict[str, int] = {}

    def encode_body(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False))

    def encode(self, text: str, bos: bool = True, eos: bool = False) -> list[int]:
        return ([self.bos_id] if bos else []) + self.encode_body(text) + ([self.eos_id] if eos else [])

    def encode_prompt(self, text: str) -> list[int]:
        """A prompt as the model's own tokenizer frames it (its BOS only where it adds one: SmolLM2 adds none),
        so greedy decoding starts from the same ids as transformers' ``generate`` on the same text."""
        return list(self.tok.encode(text, add_special_tokens=True))

    def char_ids(self, text: str) -> list[int]:
        out = []
        for c in text:
            if c not in self._chars:
                ids = self.encode_body(c)
                if len(ids) != 1:
                    raise ConfigError(f"the tokenizer at {self.path} encodes {c!r} as {len(ids)} tokens; the generated "
                                     "tasks need one token per key/value character")
                self._chars[c] = ids[0]
            out.append(self._chars[c])
        return out

    def decode(self, ids: Iterable[int] | Tensor) -> str:
        if isinstance(ids, Tensor):
            ids = ids.tolist()
        return self.tok.decode(list(ids), skip_special_tokens=True)


@lru_cache(maxsize=4)
def _hf_tokenizer(path: str) -> HFTokenizer:
    return HFTokenizer(path)


def tokenizer_for(m: ModelConfig) -> ByteTokenizer | HFTokenizer:
    """The tokenizer of the configured base: bytes for the built-in GPT, the directory's for ``model=hf``."""
    return _hf_tokenizer(m.hf_path) if m.source == "hf" else ByteTokenizer()
