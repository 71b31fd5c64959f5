"""Input checks of the controller's public API: token ids in, logits out (see obsidian MCController).

Owns :func:`token_ids` (a prompt or an append: a 1-D integer sequence inside the vocabulary),
:func:`token_batch` (``train_step``'s ``[B, T]`` ids) and :func:`finite_logits` (the base model's
next-token logits must be finite). Each raises ``ValueError`` / ``FloatingPointError`` with one
line saying what was passed and what is expected, instead of a silent cast (a float prompt
truncated to integers, a 2-D prompt flattened, a bool mask read as ids 0/1) or an ``IndexError``
deep inside the embedding.

The checks run eagerly, outside every compiled region, on the ids before they move to the device
(a min/max over a few ids is cheap next to a base-model forward).
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import Tensor

_INT_DTYPES = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)


def _as_ids(ids: Any, where: str) -> Tensor:
    """``ids`` as an integer tensor (never a cast from float/bool)."""
    if isinstance(ids, Tensor):
        t = ids
    else:
        try:
            t = torch.as_tensor(ids)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ValueError(f"{where}: token ids must be integers (a list or a LongTensor), got "
                             f"{type(ids).__name__} ({exc})") from None
    if t.dtype not in _INT_DTYPES:
        what = "bool (a mask?)" if t.dtype == torch.bool else str(t.dtype).replace("torch.", "")
        raise ValueError(f"{where}: token ids must be an integer tensor, got dtype {what}; pass integer ids "
                         "(e.g. ids.long() only if the values really are token ids)")
    return t


def _in_vocab(t: Tensor, vocab_size: int, where: str) -> None:
    if t.numel() == 0:
        return
    lo, hi = int(t.min()), int(t.max())
    if lo < 0 or hi >= vocab_size:
        bad = lo if lo < 0 else hi
        raise ValueError(f"{where}: token id {bad} is outside the vocabulary [0, {vocab_size}) "
                         f"(ids range {lo}..{hi}); model.vocab_size={vocab_size}")


def token_ids(ids: Any, vocab_size: int, where: str) -> Tensor:
    """A 1-D ``[n]`` integer sequence inside ``[0, vocab_size)`` -> the same ids as a long tensor."""
    t = _as_ids(ids, where)
    if t.dim() == 0:
        t = t.reshape(1)  # one token id
    if t.dim() != 1:
        raise ValueError(f"{where}: expected a 1-D sequence of token ids [n], got shape {list(t.shape)}; "
                         "a session holds one sequence: pass ids[0] for a batch of one")
    _in_vocab(t, vocab_size, where)
    return t.long()


def token_batch(ids_bt: Any, vocab_size: int, history_tokens: int, where: str = "train_step",
                mix: Sequence[int] = ()) -> Tensor:
    """``[B, T]`` integer ids inside the vocabulary with ``T == history_tokens`` (or a length of ``mix``,
    ``mc.history_mix``) -> the same tensor."""
    t = _as_ids(ids_bt, where)
    if t.dim() != 2:
        raise ValueError(f"{where}: expected token ids of shape [B, T] (a batch of sequences), got shape "
                         f"{list(t.shape)}; for one sequence pass ids[None]")
    check_history_length(t.shape[1], history_tokens, mix, where)
    _in_vocab(t, vocab_size, where)
    return t.long()


def check_history_length(t: int, history_tokens: int, mix: Sequence[int], where: str) -> None:
    """A stage-2 sequence of ``t`` tokens is ``history_tokens`` or a length of ``mix`` (``mc.history_mix``) long;
    else a ValueError naming both."""
    if t != history_tokens and t not in mix:
        raise ValueError(f"{where}: sequences have {t} tokens, the config trains on mc.history_tokens="
                         f"{history_tokens}" + (f" and mc.history_mix={list(mix)}" if mix else ""))


def finite_logits(logits: Tensor, where: str = "next_token_logits") -> Tensor:
    """``logits`` unchanged when every value is finite; else a FloatingPointError naming how many are not."""
    ok = torch.isfinite(logits)
    if not bool(ok.all()):
        n = int((~ok).sum())
        raise FloatingPointError(f"{where}: the base model returned {n} non-finite logit(s) (NaN/Inf) out of "
                                 f"{logits.numel()}; the working context's embeddings or the weights hold NaN/Inf "
                                 "(check the base weights and GistNet's gists)")
    return logits
