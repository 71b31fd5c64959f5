"""The base model's fit of a session's newest tokens: how the refocus judges layouts, before and after the fact.

* :func:`tail_fit`: the log-likelihood of the newest tokens under the session's layout, and of the base's own greedy
  continuation under it; the branched refocus keeps the candidate layout that fits best (:func:`mc.refocus.run_refocus`;
  obsidian Focus Allocator, "Branched refocus", "Lookahead fit");
* :func:`check_refocus`: the refocus check (``allocator.inference.refocus_check = k``). A refocus that made edits
  leaves a :class:`mc.session.PendingCheck` (the layout the session would hold had it made no edit); once k more
  tokens are in, their fit under the session's layout is weighed against their fit under that layout with the same
  appends replayed on it (:meth:`mc.session.InferenceSession.replay_layout`), and the better one stays. Every other
  rule judges a refocus before the text it serves arrives; this one judges it on that text (obsidian Focus Allocator,
  "Refocus check").

The forward runs through the controller's ``base_logits``; the lookahead's appends through its ``_extend``, so
GistNet is still called only by the controller's helper.
"""
from __future__ import annotations

from typing import Callable

import torch

from mc.inputs import finite_logits
from mc.refocus import lookahead_fit


@torch.no_grad()
def tail_fit(ctrl, n: int = 0) -> float:
    """Log-likelihood (nats) of the session's newest ``n`` tokens under its layout, from one forward (they lie in the
    LOD0 tail). ``n = 0``: the branches' fit, ``branch_tail_tokens`` tokens plus the ``branch_lookahead``
    continuation's (:func:`mc.refocus.lookahead_fit`, whose first logits the same forward reads)."""
    s, inf = ctrl._require_session(), ctrl.cfg.allocator.inference
    ahead = 0 if n else inf.branch_lookahead
    mwc, n = s.materialize(), n or inf.branch_tail_tokens
    at = torch.arange(mwc.length - n - 1, mwc.length, device=mwc.embeds.device)[None]  # [1, n + 1]: the tail's n, then the last
    logits = ctrl.base_logits(mwc.embeds[None], mwc.positions[None], mwc.lods[None], mwc.mask[None], logit_index=at)
    logp = torch.log_softmax(logits[0, :n].float(), dim=-1)  # [n, V]: the tail's rows (logits row n opens the lookahead)
    fit = float(logp.gather(1, s.history()[-n:].to(logp.device)[:, None]).sum())
    return fit + lookahead_fit(s, ctrl.next_token_logits, lambda ids: ctrl._extend(ids, False), ahead,
                               first_logits=finite_logits(logits[0, n]) if ahead else None)


@torch.no_grad()
def check_refocus(ctrl, *, force: bool = False, emit: Callable[[dict], None] | None = None) -> bool | None:
    """The refocus check of the session's last refocus with edits, when due (``refocus_check`` tokens in; ``force``:
    on the tokens in so far, at least one). The layout without its edits replaces the session's when it fits those
    tokens strictly better (a tie keeps the refocus). Returns whether it did, None when no check was due; the
    refocus's record gets both fits and the outcome, ``emit`` a telemetry event. The tree is not touched: the KV
    cache's entry comparison sees an undone refocus as it sees a collapse."""
    s, k = ctrl._require_session(), ctrl.cfg.allocator.inference.refocus_check
    c = s.check
    if c is None or (not force and c.tokens < k) or c.tokens == 0:
        if force:
            s.check = None  # no token since the refocus: nothing to judge it by
        return None
    s.check = None
    n = min(k, c.tokens)
    kept_fit, kept = tail_fit(ctrl, n), (s.wc, s.allocator)
    s.wc, s.allocator = s.replay_layout(c.wc, c.allocator, c.chunks)
    no_edit_fit = tail_fit(ctrl, n)
    reverted = no_edit_fit > kept_fit
    if not reverted:
        s.wc, s.allocator = kept
    c.record.check_fits, c.record.reverted = [kept_fit, no_edit_fit], reverted
    if emit is not None:
        emit({"kind": "refocus_check", "num_tokens": s.num_tokens, "tokens": n, "edits": len(c.record.edits),
              "fits": [kept_fit, no_edit_fit], "reverted": reverted})
    return reverted
