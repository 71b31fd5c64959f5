"""Focus policies the evaluation compares with LensNet: a random control, a salience locator and an oracle.

Owns the refocus of a controller session under scores that do **not** come from LensNet:

* ``random``: uniformly random scores, through the same allocator (same policy, legality, budget
  and cooldown), stopped after exactly as many edits as LensNet's refocus made on the same
  document. It answers "do the scores matter, or only the number of edits and the layout's
  position prior?".
* ``salience``: a non-learned locator for LensNet's own refocus search (:func:`salience_scores`): each
  entry's lexical overlap with the question, the BM25-like workaround users of compressed contexts reach
  for. The baseline LensNet must beat: same search, same budget, no learning.
* ``oracle``: the best layout the entry budget allows around a known span (the needle), built directly
  (:mod:`mc.eval.oracle_layout`): the needle opened to LOD0 (the answer's tokens first), then the
  question, then the needle's neighbours (or, ``rest="recent"``, the newest history), everything else as coarse
  as alignment allows. It is the upper bound of any focus policy at the same entry budget.

``random`` drives ``session.allocator`` with its own scores, ``oracle`` sets the session's layout; neither
calls GistNet or LensNet, so the controller's compiled boundary is untouched. LensNet's own refocus is
``MCController.refocus``. :class:`Focus` names one of them (or LensNet's, or none) and :func:`prefix_session`
opens a session over a prefix and refocuses it that way: how every evaluation variant starts.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from mc.config import RunConfig
from mc.controller import MCController
from mc.eval.draws import draw_seed
from mc.eval.oracle_layout import plan_oracle_layout
from mc.refocus import run_refocus


RANDOM_REDRAWS = 64  # random control: fresh score draws in a row that may find no edit before it gives up


def _iterate(ctrl: MCController, scores_fn, *, edit_budget: int, max_iterations: int, patience: int = 1) -> int:
    """Allocator iterations with ``scores_fn(session) -> [len(wc)]`` until ``patience`` iterations in a row
    made no edit, the budget or the iteration cap; then one cooldown tick, as a refocus does. Returns the
    number of edits applied."""
    s = ctrl.session
    if s is None:
        raise RuntimeError("no session: call controller.begin_session(prompt_ids) first")
    per_iteration = ctrl.cfg.allocator.inference.max_edits
    made = idle = 0
    for _ in range(max_iterations):
        if made >= edit_budget:
            break
        edits = s.allocator.step(s.wc, scores_fn(s), max_edits=min(per_iteration, edit_budget - made))
        made += len(edits)
        idle = 0 if edits else idle + 1
        if idle >= patience:
            break
    s.allocator.end_refocus()
    s.tokens_since_refocus = 0
    return made


def random_refocus(ctrl: MCController, n_edits: int, generator: torch.Generator) -> int:
    """Refocus the session with uniformly random scores, stopping after ``n_edits`` edits (the
    count LensNet made on the same document). Returns the edits applied.

    Under the relative policy a draw often proposes nothing (no gist ranked far enough above a group to
    trade), and stopping there left the control about half of LensNet's edits on SmolLM2 (2026-12-06,
    obsidian Evaluation): an iteration without an edit draws new scores instead, up to ``RANDOM_REDRAWS``
    in a row. Fewer edits when that many draws find none (few legal trades left, or one edit left where a trade
    costs two): on seed 2's evaluation documents 6 of LensNet's 8 in 8 of 32 tail refocuses, as many in the rest."""
    if n_edits <= 0:
        return 0
    return _iterate(ctrl, lambda s: torch.rand(len(s.wc), generator=generator) * 2 - 1,
                    edit_budget=n_edits, max_iterations=n_edits + RANDOM_REDRAWS, patience=RANDOM_REDRAWS)


def span_scores(wc, start: int, end: int) -> torch.Tensor:
    """``[len(wc)]`` scores: 1 for entries overlapping tokens ``[start, end)``, 0 elsewhere."""
    return wc.overlap_mask(start, end)


def oracle_refocus(ctrl: MCController, span: tuple[int, int], *, core: list[tuple[int, int]] | None = None,
                   question: tuple[int, int] | None = None) -> int:
    """The session's working context becomes the oracle's layout around ``span`` (the needle's tokens):
    :func:`mc.eval.oracle_layout.plan_oracle_layout`. Returns the expansions the plan made from the coarsest
    layout (the oracle is the best layout the budget allows, not a match of LensNet's edit count)."""
    return multi_span_oracle_refocus(ctrl, [span], core=core, question=question)


def multi_span_oracle_refocus(ctrl: MCController, spans: list[tuple[int, int]], *,
                              core: list[tuple[int, int]] | None = None,
                              question: tuple[int, int] | None = None, rest: str = "neighbours") -> int:
    """:func:`oracle_refocus` for several needles at once (a multi-value or variable-tracking document), the
    most important first. The plan's needle expansions get cooldown marks, as a refocus's do, so the
    answer's own tokens, appended while decoding, make room elsewhere first. ``rest``: where the plan spends
    what the needles leave (:data:`mc.eval.oracle_layout.ORACLE_RESTS`). Returns the expansions made."""
    if not spans or any(not 0 <= a < b for a, b in spans):
        raise ValueError(f"multi_span_oracle_refocus: spans must be non-empty token ranges, got {spans}")
    s = ctrl.session
    if s is None or s.wc is None:
        raise RuntimeError("no session: call controller.begin_session(prompt_ids) first")
    plan, protected = plan_oracle_layout(s.wc, spans, core=core or (), question=question, rest=rest)
    n_expanded = _expansions(plan)
    s.wc = plan
    s.allocator.mark_expanded(protected, plan.block_size)
    s.allocator.end_refocus()
    s.tokens_since_refocus = 0
    return n_expanded


def _expansions(wc) -> int:
    """Expansions from the coarsest layout to ``wc``: every expansion adds K - 1 entries."""
    coarse = type(wc).build(wc.num_tokens, block_size=wc.block_size, max_lod=wc.max_lod, max_entries=wc.max_entries,
                            recent_tokens=wc.recent_tokens, fill=False)
    return (len(wc) - len(coarse)) // (wc.block_size - 1)


def salience_scores(s, question: tuple[int, int]) -> Tensor:
    """``[len(wc)]`` in [-1, 1]: each entry's lexical overlap with the question (tokens ``question`` of the
    history): the sum over the question's distinct tokens found in the entry's span of their inverse document
    frequency across entries, scaled so the best entry is 1 and no overlap is -1. Entries at or after the
    question's start score 0 (they are the question itself)."""
    hist = s.history().cpu()  # [n]: a host rule over host index tables (spans, counts)
    q = torch.unique(hist[question[0]:question[1]])  # [Q]
    wc = s.wc
    spans = torch.tensor([wc.span(i) for i in range(len(wc))], dtype=torch.long)  # [E, 2]
    counts = torch.cat([torch.zeros(1, len(q), dtype=torch.long), torch.cumsum(hist[:, None] == q[None], 0)])  # [n+1, Q]
    present = ((counts[spans[:, 1]] - counts[spans[:, 0]]) > 0).float()  # [E, Q]
    before = (spans[:, 1] <= question[0]).float()  # [E]
    present = present * before[:, None]
    df = present.sum(0)  # [Q]
    idf = torch.log((before.sum() + 1.0) / (df + 0.5)).clamp_min(0.0)
    raw = present @ idf  # [E]
    top = float(raw.max())
    if top <= 0.0:
        return torch.zeros(len(wc))
    return torch.where(before > 0, 2.0 * raw / top - 1.0, torch.zeros_like(raw))


def salience_refocus(ctrl: MCController, question: tuple[int, int]) -> int:
    """One refocus of the session with the run's own search, budget and rules, :func:`salience_scores` in
    place of LensNet's scores. Returns the edits applied."""
    if ctrl.session is None:
        raise RuntimeError("no session: call controller.begin_session(prompt_ids) first")
    return len(run_refocus(ctrl.session, lambda sess: salience_scores(sess, question), ctrl._tail_fit).edits)


@dataclass
class Focus:
    """How a prefix session is refocused before scoring: ``kind`` is ``none`` (variant c),
    ``lensnet`` (d), ``random`` (e: ``n_edits`` random-score edits drawn from ``generator``) or
    ``oracle`` (the best layout around ``span``: :mod:`mc.eval.oracle_layout`)."""

    kind: str = "none"
    n_edits: int = 0
    generator: torch.Generator | None = None
    span: tuple[int, int] | None = None


def prefix_session(ctrl: MCController, prefix: Tensor, *, focus: Focus) -> tuple:
    """Session over ``prefix`` (``WorkingContext.build(fill=True)`` at the budget), refocused as
    ``focus`` says. Returns ``(session, entries_before_refocus, n_edits)``."""
    s = ctrl.begin_session(prefix)
    before = s.wc.entries
    if focus.kind == "lensnet":
        edits = len(ctrl.refocus().edits)
    elif focus.kind == "random":
        edits = random_refocus(ctrl, focus.n_edits, focus.generator)
    elif focus.kind == "oracle":
        edits = oracle_refocus(ctrl, focus.span)
    elif focus.kind == "none":
        edits = 0
    else:
        raise ValueError(f"unknown focus kind {focus.kind!r}; expected none, lensnet, random or oracle")
    return s, before, edits


def random_focus_for(cfg: RunConfig, doc_name: str, n_edits: int) -> Focus:
    """The random control for one document: seeded by the run seed and the document, so the same
    document gets the same random edits in every variant that needs them."""
    seed = (draw_seed(cfg) * 1_000_003 + sum(map(ord, doc_name))) % (2 ** 31)
    return Focus("random", n_edits=n_edits, generator=torch.Generator().manual_seed(seed))
