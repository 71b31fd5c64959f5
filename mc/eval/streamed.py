"""The tail read token by token, as a decoding session reads it (the evaluation's ``*_stream_loss`` metrics).

The chunked tail loss (:func:`mc.eval.evaluate.wc_tail_loss`) appends the whole scored tail in one call and
scores every tail token under the layout left after the *last* append. A session that reads or writes text
predicts each token under the layout as it stands when that token comes: before the collapses the later
tokens force. The two differ most right after a refocus, whose opened blocks are in cooldown, so the tail's
appends collapse the raw text just before the tail instead (obsidian Evaluation, "Read token by token, the
harm is the metric's"). Here every variant is read the streaming way, at the same budget:

* :func:`lod0_stream_loss`: the base model alone, each tail token predicted from at most ``window`` tokens
  right before it (recency is a sliding window of ``B`` raw tokens; ``full`` one of ``model.max_seq_len``);
* :func:`wc_stream_loss`: a controller session as it stands (refocused or not), each tail token's loss read
  from the working context before it is appended, then appended at LOD0 with no refocus;
* :func:`wc_session_loss`: the same with the refocuses a decoding session makes every ``refocus_interval``
  tokens (the evaluation's ``*_session_loss``, :mod:`mc.eval.session_read`).
"""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from mc.positions import base_positions_list


@torch.no_grad()
def lod0_stream_loss(base, ids: Tensor, *, window: int, tail: int, batch_tokens: int = 1 << 16) -> float:
    """Mean loss of the last ``tail`` tokens of ``ids [N]``, each predicted from the ``window`` tokens before it.

    Tokens at index ``t <= window`` see the whole prefix ``ids[:t]``: one causal pass over ``ids[:window]``
    gives them all (teacher forcing *is* streaming there). Later ones see ``ids[t - window: t]``, equal-length
    windows run together up to ``batch_tokens`` tokens a forward (W = 2048 windows on a GPU: 32 a forward), only
    their last position through the LM head.
    """
    ids = torch.as_tensor(ids, dtype=torch.long).reshape(-1)
    n = ids.numel()
    if not 0 < tail < n:
        raise ValueError(f"lod0_stream_loss: tail={tail} must be in 1..{n - 1} (the document has {n} tokens)")
    if window < 1:
        raise ValueError(f"lod0_stream_loss: window={window} must be >= 1")
    dev = next(base.parameters()).device
    ids = ids.to(dev)
    targets = list(range(n - tail, n))
    losses: list[Tensor] = []
    early = [t for t in targets if t <= window]
    if early:  # one causal pass: position t - 1 predicts token t from ids[:t]
        logits = base(ids[None, : early[-1]])[0]  # [t_max, V]
        idx = torch.tensor([t - 1 for t in early], device=dev)
        losses.append(F.cross_entropy(logits[idx].float(), ids[idx + 1], reduction="none"))
    late = [t for t in targets if t > window]
    batch = max(1, batch_tokens // window)
    for i in range(0, len(late), batch):
        ts = torch.tensor(late[i: i + batch], device=dev)
        ctx = ids[ts[:, None] - window + torch.arange(window, device=dev)]  # [b, window]
        last = torch.full((len(ts), 1), window - 1, dtype=torch.long, device=dev)
        logits = base(ctx, logit_index=last)[:, 0]  # [b, V]
        losses.append(F.cross_entropy(logits.float(), ids[ts], reduction="none"))
    return float(torch.cat(losses).mean())


def _base_positions(ctrl) -> list[float]:
    """The positions the base model sees for the session's entries: under ``bounded`` and ``entries`` positions the
    older entries move when the exact region's start steps on, a change of layout for the base as a collapse is."""
    mc = ctrl.cfg.mc
    return base_positions_list(ctrl.session.wc.positions(), mode=mc.positions, window=ctrl.cfg.model.max_seq_len,
                               recent=mc.recent_tokens)


def _segment_losses(ctrl, targets: Tensor, n_raw: int) -> Tensor:
    """Losses ``[k]`` of ``targets [k]`` from one forward over the working context as it stands, which ends with
    ``n_raw`` raw tail tokens appended since its layout last changed: ``targets[j]`` is predicted at entry
    ``L - 1 - n_raw + j`` (the entry before the first of them, then each of them)."""
    mwc = ctrl.session.materialize()
    L, k = mwc.length, targets.numel()
    first = L - 1 - n_raw
    if n_raw and not torch.equal(mwc.token_ids[L - n_raw: L].cpu(), targets[:n_raw].cpu()):
        raise RuntimeError("evaluation bug: the working context's last entries are not the streamed tail tokens")
    at = torch.arange(first, first + k, device=mwc.embeds.device)[None]  # [1, k]
    logits = ctrl.base_logits(mwc.embeds[None], mwc.positions[None], mwc.lods[None], mwc.mask[None], logit_index=at)
    return F.cross_entropy(logits[0].float(), targets.to(logits.device), reduction="none")


@torch.no_grad()
def wc_stream_loss(ctrl, tail_ids: Tensor) -> float:
    """Mean loss of ``tail_ids [T]`` read into the controller's open session one token at a time.

    Each token is scored on the logits of the working context as it stands before it, then appended at LOD0
    without refocus (the session makes room within its budget as it would while decoding); the session is
    left holding the tail, as after :meth:`~mc.controller.MCController.append`. Between two layout changes
    (a collapse to make room, a new level, older entries
    moved by the base's position map) the appends only add raw entries at the end, so every token of such
    a run is read off one forward over the context before the change, as causal attention reads it token by
    token: a handful of forwards per tail instead of one per token, the same numbers as the cache-free
    ``next_token_logits`` read before every append.
    """
    return wc_session_loss(ctrl, tail_ids)[0]


@torch.no_grad()
def wc_session_loss(ctrl, tail_ids: Tensor, *, every: int = 0,
                    refocus: Callable[[], int] | None = None) -> tuple[float, list[int]]:
    """:func:`wc_stream_loss` with the refocuses a decoding session makes on schedule: after every ``every``
    appended tail tokens (not after the last) ``refocus()`` runs on the session, as
    :func:`mc.decode.generate` refocuses every ``allocator.inference.refocus_interval`` tokens, and the tokens
    after it are read under the layout it leaves; with ``allocator.inference.refocus_check`` the controller's check
    of a refocus runs when due, as in ``generate``. Returns the mean loss and the edits each refocus made (its
    return value), in order. ``every = 0``: no refocus (``refocus`` is then not called).
    """
    s = ctrl.session
    if s is None or s.wc is None:
        raise RuntimeError("the streamed read needs an open session: call controller.begin_session(prefix) first")
    if every < 0 or (every > 0 and refocus is None):
        raise ValueError(f"wc_session_loss: every={every} must be >= 0, and a refocus callable is needed when > 0")
    tail_ids = torch.as_tensor(tail_ids, dtype=torch.long).reshape(-1)
    n = tail_ids.numel()
    losses, edits, start = [], [], 0  # tail_ids[start:i] are appended as raw entries on a layout unchanged since

    def read_up_to(end: int) -> None:  # before a check or refocus changes the layout: tail_ids[start:end] off it
        nonlocal start
        if start < end:
            losses.append(_segment_losses(ctrl, tail_ids[start: end], end - start))
        start = end
    for i in range(n):
        tok = tail_ids[i: i + 1]
        before, pos_before, snap, n_tok = s.wc.entries, _base_positions(ctrl), s.snapshot(), s.num_tokens
        ctrl.append(tok, refocus=False)
        if s.wc.entries != before + [(0, n_tok)] or _base_positions(ctrl)[:-1] != pos_before:
            s.restore(snap)  # the append changed the layout: read tail_ids[start: i + 1] off the context before it
            losses.append(_segment_losses(ctrl, tail_ids[start: i + 1], i - start))
            ctrl.append(tok, refocus=False)
            start = i + 1
        if every and i + 1 < n and s.check_due():  # a refocus check (refocus_check) may undo its edits
            read_up_to(i + 1)
            ctrl.check_refocus()
        if every and (i + 1) % every == 0 and i + 1 < n:  # the scheduled refocus: read what came before it first
            read_up_to(i + 1)
            edits.append(int(refocus()))
    if start < n:  # the last run: its tokens are the context's last entries
        losses.append(_segment_losses(ctrl, tail_ids[start:], n - start))
    return float(torch.cat(losses).mean()), edits
