"""Plain-LOD0 evaluation variants: the base model alone over a window of the last tokens.

Variant (a) "full context" and (b) "recency only" of the evaluation are both the frozen base GPT
reading the *last* ``window`` tokens of a document at LOD0 through its ordinary token-ids path
(plain rotary positions). Rotary attention depends only on relative positions, so starting the
window at position 0 changes nothing but the numerical offset.

* :func:`lod0_tail_loss`: per-token next-token loss of the last ``tail`` tokens, teacher forced.
* :func:`lod0_answer`: recall of the last ``value_len`` tokens: the teacher-forced answer loss and a
  genuine greedy decode. The decode starts from the last ``window - value_len`` prompt tokens and
  appends its own predictions, so the context never exceeds ``window`` tokens (the same budget the
  working-context variants get for prompt + answer).

GistNet/LensNet are never involved here (those variants go through the controller).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from mc.nets.gpt import GPT


def _check(ids: Tensor, window: int, need: int, what: str) -> Tensor:
    ids = torch.as_tensor(ids, dtype=torch.long).reshape(-1)
    if window <= need:
        raise ValueError(f"{what}: window={window} must exceed {need} (the scored tokens need a predecessor)")
    if ids.numel() <= need:
        raise ValueError(f"{what}: the document has {ids.numel()} tokens, need more than {need}")
    return ids


@torch.no_grad()
def lod0_tail_loss(base: GPT, ids: Tensor, *, window: int, tail: int) -> float:
    """Mean next-token loss of the last ``tail`` tokens of ``ids [N]`` given the last ``window`` tokens."""
    ids = _check(ids, window, tail, "lod0_tail_loss")
    dev = next(base.parameters()).device
    ctx = ids[-window:].to(dev)  # [W]
    w = ctx.numel()
    logits = base(ctx[None])[0]  # [W, V]
    # position i predicts token i+1: the last `tail` targets are predicted from [w-tail-1, w-1)
    return float(F.cross_entropy(logits[w - tail - 1: w - 1].float(), ctx[w - tail:]))


@torch.no_grad()
def lod0_answer(base: GPT, ids: Tensor, *, window: int, value_len: int) -> dict:
    """Recall of the last ``value_len`` tokens of ``ids``: ``{nll, exact, predicted}``.

    ``nll``: mean teacher-forced loss of the answer tokens given the last ``window`` tokens.
    ``exact``: the greedy decode (starting from the prompt's last ``window - value_len`` tokens)
    reproduces every answer token. ``predicted``: the decoded ids.
    """
    ids = _check(ids, window, value_len, "lod0_answer")
    dev = next(base.parameters()).device
    answer = ids[-value_len:]
    ctx = ids[-window:].to(dev)
    w = ctx.numel()
    logits = base(ctx[None])[0]
    nll = float(F.cross_entropy(logits[w - value_len - 1: w - 1].float(), ctx[w - value_len:]))
    seq = ids[:-value_len][-(window - value_len):].to(dev)  # the prompt window
    out = []
    for _ in range(value_len):
        tok = base(seq[None])[0, -1].argmax()
        out.append(int(tok))
        seq = torch.cat([seq, tok.reshape(1)])[-window:]
    predicted = torch.tensor(out, dtype=torch.long)
    return {"nll": nll, "exact": bool(torch.equal(predicted, answer.cpu())), "predicted": out}
