"""A session's read of a document's end: token by token, refocusing on schedule (the ``*_session_loss`` metrics).

The token-by-token tail read (:mod:`mc.eval.streamed`) scores a short tail after *one* refocus made at its start.
A session that decodes or reads on refocuses every ``allocator.inference.refocus_interval`` tokens, each time on
a layout the previous refocus left, its opened blocks cooling while the appends collapse others. Whether that
helps or harms is not what one refocus says (obsidian Evaluation, "A session's read"). With
``eval.session_tail = S > 0`` every evaluation document's last ``S`` tokens are read the way such a session reads
them, each variant at the same budget ``B``:

* ``full`` / ``recency``: the base over at most ``model.max_seq_len`` / ``B`` raw tokens before each token;
* ``compressed``: the session over the prefix, never refocused;
* ``focused``: refocused by LensNet (the run's refocus rules) at the prefix's end and after every
  ``refocus_interval`` tail tokens, as :func:`mc.decode.generate` does;
* ``random``: at the same moments a refocus with uniformly random scores making as many edits as the focused
  session's refocus made at that moment.
"""
from __future__ import annotations

import torch
from torch import Tensor

from mc.config import RunConfig
from mc.controller import MCController
from mc.eval.focus_policies import Focus, prefix_session, random_focus_for, random_refocus
from mc.eval.streamed import lod0_stream_loss, wc_session_loss


@torch.no_grad()
def session_losses(ctrl: MCController, cfg: RunConfig, ids: Tensor, name: str) -> dict:
    """The session read of document ``ids [N]`` (named ``name``, which seeds its random control).

    Returns ``{"values": {variant: mean loss}, "edits": {"focused": [...], "random": [...]}, "checks": {...}}``,
    the edits of every refocus in order, the one at the prefix's end first, and how many of the focused session's
    refocuses were checked and undone (``allocator.inference.refocus_check``; 0 and 0 when off). The random control
    makes its edits unchecked: it stands for the refocus's proposals, at the same moments and counts."""
    S, every = cfg.eval.session_tail, cfg.allocator.inference.refocus_interval
    prefix, tail = ids[:-S], ids[-S:]
    prefix_session(ctrl, prefix, focus=Focus("none"))
    compressed, _ = wc_session_loss(ctrl, tail)
    _, _, first = prefix_session(ctrl, prefix, focus=Focus("lensnet"))
    focused, later = wc_session_loss(ctrl, tail, every=every, refocus=lambda: len(ctrl.refocus(scheduled=True).edits))
    undone = [r.reverted for r in ctrl.session.refocus_log if r.check_fits]  # allocator.inference.refocus_check
    rnd = random_focus_for(cfg, name, first)
    _, _, r_first = prefix_session(ctrl, prefix, focus=rnd)
    counts = iter(later)  # the random control's k-th refocus makes as many edits as the focused session's k-th
    random, r_later = wc_session_loss(ctrl, tail, every=every,
                                      refocus=lambda: random_refocus(ctrl, next(counts), rnd.generator))
    base, B = ctrl.base, cfg.mc.max_entries
    values = {"full": lod0_stream_loss(base, ids, window=cfg.model.max_seq_len, tail=S),
              "recency": lod0_stream_loss(base, ids, window=B, tail=S),
              "compressed": compressed, "focused": focused, "random": random}
    return {"values": values, "edits": {"focused": [first, *later], "random": [r_first, *r_later]},
            "checks": {"checked": len(undone), "undone": sum(undone)}}
