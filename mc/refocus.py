"""The refocus of an inference session: allocator iterations on LensNet's scores, optionally branched.

Owns the policy of one refocus; the :class:`mc.controller.MCController` calls :func:`run_refocus` with
its own helpers for LensNet's scores and the base model's fit of the newest tokens, so the controller's
helpers stay the only call sites of the (possibly compiled) nets.

* a **zoom** (:func:`zoom`) runs allocator iterations until one chooses no edit,
  ``allocator.inference.iterations`` ran, or the edit budget is spent; each iteration rescores the
  edited layout, so a detail under an LOD-L gist is reached in L iterations (multi-level refocus);
* with ``allocator.inference.edge_first``, once a zoom has opened a block to LOD0 its next expansions (up to
  ``edge_sides``: one or both sides, then with more the run of open blocks grows outward) are the gists
  bordering that block, best-scored first, within the same budget: a needle across two blocks (or a sentence
  across several) is opened whole (obsidian Focus Allocator, "Edge first");
* with ``allocator.inference.descend_first``, an expansion of an LOD >= 2 gist is followed by one of its children
  (the best-scored), so a zoom finishes the path it started instead of leaving two half paths (obsidian Focus
  Allocator, "Descend first");
* with ``allocator.inference.branches = b > 1``, :func:`run_refocus` also zooms each of the gists LensNet
  ranked 2nd..b-th on the starting layout (each from that layout, same edit budget, held on its subtree
  by a score bonus) and keeps the layout under which the base model best predicts the newest
  ``allocator.inference.branch_tail_tokens`` tokens (their log-likelihood); another path replaces
  LensNet's own zoom only when it fits them better by ``allocator.inference.branch_margin`` nats.
  Why: LensNet ranks the queried record's coarse gist first in most but not all documents (when it is
  wrong, a distractor's gist is first and the needle's second or third), and the newest tokens (the
  question) are best explained by the layout that holds what they refer to (obsidian Focus Allocator,
  "Branched refocus"); with ``allocator.inference.branch_siblings`` the branches also zoom each child that
  LensNet's zoom passed over when it descended (the runner-up under each gist it opened), since a record and a
  distractor often share a coarse gist (obsidian Focus Allocator, "Sibling branches"); with
  ``allocator.inference.branch_unchanged`` the starting layout itself is the last candidate, kept (no edit) on the
  same rule, so a refocus does not trade away a detail the question already reads (obsidian Focus Allocator,
  "Unchanged branch"); with ``allocator.inference.branch_lookahead = n > 0`` each candidate's fit also counts the
  base's own greedy continuation of n tokens under it (:func:`lookahead_fit`), so a question that names nothing is
  told apart by how sure the base is of its answer (obsidian Focus Allocator, "Lookahead fit"); with
  ``allocator.inference.branch_max_tokens = n > 0`` only a session of at most n tokens zooms other paths; a
  longer one's refocus is LensNet's zoom alone, or that zoom against the unchanged layout (:func:`branches_here`);
  with ``allocator.inference.scheduled_margin = m > 0``, in a refocus a session makes on its own schedule (every
  ``refocus_interval`` appended or generated tokens, after its first refocus) the unchanged layout is kept unless a
  path fits by at least m nats more: there no question says what to open, and a zoom that fits the newest tokens a
  little better most often reads the text after it worse (obsidian Focus Allocator, "Scheduled margin"); such a
  refocus that keeps no edit leaves the allocator as it was but for the cooldown clock (margin or not); with
  ``allocator.inference.prompt_margin = m > 0`` that margin for every other refocus (at a prompt's end: a question, or
  text to continue, which the controller cannot tell apart; it keeps its marks; obsidian Focus Allocator, "Prompt
  margin");
* with ``allocator.inference.token_anchor``, in a refocus that does not branch (LensNet's zoom alone, or against
  the unchanged layout), the token LensNet scores highest outside the recent tail, when it outscores 0 and every
  gist (:func:`token_anchor`), is protected from the zoom's trades for the cooldown (its block is marked as if just
  expanded), and the zoom, with ``edge_first``, opens the gists bordering its block first: a record half in the
  raw text and half under a gist (the needle just before the raw region) is read whole, and one already raw is not
  traded away (obsidian Focus Allocator, "Token anchor");
* with ``allocator.inference.suffix_guard = m > 0``, the raw blocks at and after the latest earlier occurrence of the
  session's newest text (its longest suffix of at least m tokens found before the recent tail: a question's key
  in its record) are kept out of every path's trades (:func:`suffix_guard_blocks`), so no zoom collapses a record
  the question already reads at full detail (obsidian Focus Allocator, "Suffix guard");
* with ``allocator.inference.anchor_path`` (and ``token_anchor``, ``branch_unchanged``), the anchored zoom's layout
  as it stood once the gists bordering the anchor were open is a candidate too, weighed by the same fit: the rest
  of the budget goes to LensNet's next-best gists, often a near-miss record beside the one the question names,
  and its trades collapse the raw text around the anchor (obsidian Focus Allocator, "Anchor path").
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from mc.config import AllocatorInferenceConfig
from mc.session import InferenceSession, PendingCheck, RefocusRecord
from mc.working_context import Entry

ScoreFn = Callable[[InferenceSession], Tensor]  # session -> LensNet scores [len(wc)] on its current layout
TailFitFn = Callable[[], float]  # log-likelihood of the session's newest tokens under its current layout

BRANCH_BONUS = 2.0  # added to a branch's entries; LensNet's scores are tanh, in [-1, 1], so they rank first


def refocus_edit_budget(inf: AllocatorInferenceConfig) -> int:
    """Edits one refocus path may make: ``allocator.inference.edit_budget``, or ``iterations * max_edits`` when 0."""
    return inf.edit_budget or inf.iterations * inf.max_edits


def lookahead_fit(s: InferenceSession, next_logits: Callable[[], Tensor], extend: Callable[[Tensor], None],
                  n: int, first_logits: Tensor | None = None) -> float:
    """Log-likelihood (nats) of the base's own greedy continuation of ``n`` tokens under the session's current
    layout: each step takes the argmax token and adds its log-probability, then appends it (``extend``, no
    refocus: the appends make room as decoding would) unless it was the last. ``first_logits`` (``[V]``) are the
    next-token logits the caller already has for the current layout (the tail fit's forward reads them at no
    cost), saving one forward. The session is restored afterwards, also when a step fails. 0.0 when n is 0."""
    if n == 0:
        return 0.0
    snap = s.snapshot()
    total = 0.0
    try:
        for step in range(n):
            logits = first_logits if step == 0 and first_logits is not None else next_logits()
            logp = torch.log_softmax(logits.float(), dim=-1)  # [V]
            tok = logp.argmax()
            total += float(logp[tok])
            if step < n - 1:  # the last token is never read: appending it would only cost a GistNet pass
                extend(tok.view(1))
    finally:
        s.restore(snap)
    return total


def zoom(s: InferenceSession, scores_fn: ScoreFn, focus_span: tuple[int, int] | None = None,
         start_scores: Tensor | None = None, anchor: tuple[int, int] | None = None,
         on_edges: Callable[[RefocusRecord], None] | None = None) -> tuple[RefocusRecord, list[float]]:
    """One refocus path on ``s`` (edits applied). Returns what it did and the first iteration's scores
    (over the starting layout's entries). With ``focus_span`` (a branch) the entries covering that token
    range get :data:`BRANCH_BONUS`, so the path stays in that subtree: its gists rank first for
    expansion and its groups are never the cheapest to trade away. ``start_scores``: LensNet's scores of the
    starting layout when the caller has them (the first iteration then makes no LensNet call); ``anchor``: the
    token range of an anchored block (:func:`token_anchor`), whose bordering gists are the first edges;
    ``on_edges``: called once with the record so far when the edge expansions end (``edge_sides`` opened, or no
    gist left to open at the edge) and the zoom goes on, so the caller can keep that layout
    (``allocator.inference.anchor_path``)."""
    inf = s.cfg.allocator.inference
    budget = refocus_edit_budget(inf)
    record, first_scores = RefocusRecord(num_tokens=s.num_tokens, iterations=0), []
    edges_opened = 0
    while record.iterations < inf.iterations and len(record.edits) < budget:
        scores = start_scores if record.iterations == 0 and start_scores is not None else scores_fn(s)
        if record.iterations == 0:
            first_scores = scores.tolist()
        if focus_span is not None:
            scores = scores + BRANCH_BONUS * s.wc.overlap_mask(*focus_span)
        edge = None
        if inf.edge_first and edges_opened < inf.edge_sides:  # then LensNet's own ranking again
            scores, edge = _lift_edge(s, scores, record.edits, anchor)
        if edge is None and inf.descend_first:
            scores, passed = _lift_child(s, scores, record.edits)
            if passed is not None:
                record.passed_over.append(passed)
        if on_edges is not None and edges_opened and (edge is None or edges_opened >= inf.edge_sides):
            on_edges(RefocusRecord(num_tokens=record.num_tokens, iterations=record.iterations, edits=list(record.edits)))
            on_edges = None  # once: the layout the edges left, before LensNet's own ranking spends the rest
        edits = s.allocator.step(s.wc, scores, max_edits=min(inf.max_edits, budget - len(record.edits)))
        edges_opened += any(e.kind == "expand" and e.entry == edge for e in edits)
        record.iterations += 1
        record.edits += edits
        if not edits:
            break
    return record, first_scores


def edge_gists(s: InferenceSession, edits, grow: bool = False, anchor: tuple[int, int] | None = None) -> list[int]:
    """Indices of the gists that border the first block ``edits`` opened to LOD0 (the first LOD1 gist expanded),
    except gists the cooldown keeps from expanding. Tokens are in order in the working context, so a gist borders
    the block when its span ends where the block starts or starts where it ends. With ``grow``, once no gist
    borders that block (both sides are open), the gists bordering the whole run of LOD0 tokens around it. Before
    any block is opened, the gists bordering ``anchor`` (a token range already at LOD0; never grown: a raw run can
    be long, and its far ends say nothing about the anchor)."""
    first = next((e.entry for e in edits if e.kind == "expand" and e.entry[0] == 1), None)
    if first is None:
        return [] if anchor is None else _bordering(s, *anchor)
    K, wc = s.wc.block_size, s.wc
    lo, hi = first[1] * K, (first[1] + 1) * K
    gists = _bordering(s, lo, hi)
    if gists or not grow:
        return gists
    raw = {wc[i][1] for i in range(len(wc)) if wc[i][0] == 0}  # token ids at LOD0 are their positions
    while lo - 1 in raw:
        lo -= 1
    while hi in raw:
        hi += 1
    return _bordering(s, lo, hi)


def _bordering(s: InferenceSession, lo: int, hi: int) -> list[int]:
    """Indices of the expandable gists whose span ends at token ``lo`` or starts at token ``hi``."""
    wc = s.wc
    return [i for i, (a, b) in enumerate(map(wc.span, range(len(wc))))
            if wc[i][0] > 0 and (b == lo or a == hi) and not s.allocator.expand_blocked(wc[i])]


def _ranked(scores: Tensor, candidates: list[int]) -> list[int]:
    """``candidates`` best-scored first (ties: the older entry first)."""
    return sorted(candidates, key=lambda i: (float(scores[i]), -i), reverse=True)


def _lift_best(scores: Tensor, candidates: list[int]) -> tuple[Tensor, int | None]:
    """The candidate LensNet scores highest (:func:`_ranked`) raised above every other entry, a branch's own
    included (scores are in [-1, 1]), so the allocator's next expansion opens it. Unchanged scores and None
    without candidates."""
    if not candidates:
        return scores, None
    best = _ranked(scores, candidates)[0]
    scores = scores.clone()
    scores[best] += 2 * BRANCH_BONUS
    return scores, best


def _lift_edge(s: InferenceSession, scores: Tensor, edits, anchor: tuple[int, int] | None = None
               ) -> tuple[Tensor, Entry | None]:
    """``allocator.inference.edge_first``: the best-scored gist bordering the first opened block (before one, the
    anchored block) ranks first. Returns the scores and that gist's entry (None when no gist borders one)."""
    scores, best = _lift_best(scores, edge_gists(s, edits, grow=s.cfg.allocator.inference.edge_sides > 2, anchor=anchor))
    return scores, None if best is None else s.wc[best]


def _lift_child(s: InferenceSession, scores: Tensor, edits) -> tuple[Tensor, tuple[int, int] | None]:
    """``allocator.inference.descend_first``: when the zoom's last expansion opened a gist of LOD >= 2, its
    best-scored child ranks first, so the zoom finishes the path it started. Unchanged scores when the last
    expansion was of an LOD1 gist (its children are tokens) or its children are all open or cooling down.
    Also returns the token span of the runner-up child (None when there is none): the sibling the zoom passed
    over, a branch candidate (``allocator.inference.branch_siblings``)."""
    last = next((e.entry for e in reversed(edits) if e.kind == "expand"), None)
    if last is None or last[0] < 2:
        return scores, None
    lod, idx = last
    K, wc = s.wc.block_size, s.wc
    kids = [i for i in range(len(wc)) if wc[i][0] == lod - 1 and wc[i][1] // K == idx
            and not s.allocator.expand_blocked(wc[i])]
    ranked = _ranked(scores, kids)
    lifted, _ = _lift_best(scores, ranked[:1])
    return lifted, wc.span(ranked[1]) if len(ranked) > 1 else None


def token_anchor(s: InferenceSession, scores: Tensor) -> int | None:
    """``allocator.inference.token_anchor``: the index of the LOD0 entry LensNet scores highest (``scores``:
    ``[len(wc)]``, the starting layout's) among the tokens before the recent tail (``mc.recent_tokens``, where the
    question is), when its score is above 0 and above every gist's; else None. A token cannot be expanded, so a
    top score on one says the record is at least partly raw already (the token index matches it there)."""
    wc, tail = s.wc, s.num_tokens - s.cfg.mc.recent_tokens
    raw = [i for i in range(len(wc)) if wc[i][0] == 0 and wc[i][1] < tail]
    if not raw:
        return None
    best = _ranked(scores, raw)[0]
    gist_best = max((float(scores[i]) for i in range(len(wc)) if wc[i][0] > 0), default=float("-inf"))
    return best if float(scores[best]) > max(0.0, gist_best) else None


SUFFIX_GUARD_MAX = 32  # tokens of the session's newest text matched at most: a question's key is far shorter


def suffix_guard_blocks(s: InferenceSession, min_len: int) -> list[int]:
    """``allocator.inference.suffix_guard``: the K-blocks to keep out of a refocus's trades. The session's newest
    tokens (the question, when a refocus precedes an answer) are matched against the earlier history: the longest
    suffix of at least ``min_len`` tokens (at most :data:`SUFFIX_GUARD_MAX`) that occurs, with the token after it,
    before the recent tail; at its latest occurrence, the blocks overlapping the match and as many tokens after it
    (where a record's value follows its key), of those only the blocks wholly at LOD0 now. A guard, not a locator:
    a match under a gist is left to LensNet. Empty when nothing matches."""
    ids = s.history()  # [T]
    n, end = ids.numel(), s.num_tokens - s.cfg.mc.recent_tokens
    if min_len < 1 or end < 2 or n < min_len:
        return []
    # candidate last tokens p of an occurrence (p + 1 < end), kept while they still match one more token back: only
    # the first comparison reads the whole history, so a long session's refocus stays cheap
    ends = torch.arange(end - 1, device=ids.device)
    best, p = 0, -1
    for j in range(min(SUFFIX_GUARD_MAX, n)):
        back = ends - j
        ends = ends[(back >= 0) & (ids[back.clamp(min=0)] == ids[n - 1 - j])]
        if ends.numel() == 0:
            break
        best, p = j + 1, int(ends.max())  # the latest occurrence of the longest match: the newest record of that key
    if best < min_len:
        return []
    K, wc = s.wc.block_size, s.wc
    raw = {wc[i][1] for i in range(len(wc)) if wc[i][0] == 0}  # token positions at LOD0
    lo, hi = p - best + 1, min(p + best, end - 1)  # the match, then as many tokens after it
    return [b for b in range(lo // K, hi // K + 1) if all(t in raw for t in range(b * K, (b + 1) * K))]


def branches_here(inf: AllocatorInferenceConfig, num_tokens: int) -> bool:
    """Whether a refocus of a session holding ``num_tokens`` tokens branches: ``branches > 1`` and, with
    ``branch_max_tokens > 0``, a history no longer than that (past it the other zoom paths stopped reading more
    documents than LensNet's zoom alone; obsidian Focus Allocator, "Short histories branch"). The unchanged layout
    (``branch_unchanged``) stays a candidate at every length."""
    return inf.branches > 1 and (inf.branch_max_tokens == 0 or num_tokens <= inf.branch_max_tokens)


def run_refocus(s: InferenceSession, scores_fn: ScoreFn, tail_fit_fn: TailFitFn, scheduled: bool = False,
                relaid: bool = False) -> RefocusRecord:
    """A whole refocus (see the module docstring): zoom, branches, one cooldown tick. ``scheduled``: one a session
    makes on its own schedule (``allocator.inference.scheduled_margin`` applies), not one called at a question;
    ``relaid``: the caller gave the session a new session's layout first (kept in the record). A scheduled refocus
    that keeps no edit changes nothing but the cooldown clock (its anchor and guard marks are dropped).
    Returns its record (``branch``: the path kept; ``branch_fits``: per path tried, empty with one branch). With
    ``allocator.inference.refocus_check`` a refocus that made edits leaves ``s.check``: the layout and allocator the
    session would hold had it made no edit (after the cooldown tick, with the anchor and guard marks unless
    scheduled), which :func:`mc.layout_fit.check_refocus` weighs against its own once enough tokens are in."""
    inf = s.cfg.allocator.inference
    branched = branches_here(inf, s.num_tokens)  # other zoom paths; the unchanged layout is a candidate at any length
    # a scheduled refocus that keeps no edit leaves the session as it found it: the anchor's and guard's cooldown marks
    # would otherwise outlast it and steer make_room through the text that follows, which cost corpus text more than
    # it gave recall documents (obsidian Focus Allocator, "Scheduled margin")
    unmarked = s.allocator.copy() if scheduled else None
    start_scores, anchor = None, None
    # only where LensNet's zoom stands alone (against the unchanged layout at most): where the refocus branches, the
    # base's fit already weighs several paths, and the anchor measured a loss there (obsidian Focus Allocator)
    if inf.token_anchor and not branched:  # before the copies: the protection holds on the unchanged layout too
        start_scores = scores_fn(s)  # the zoom's first iteration reads these: no extra LensNet call
        a = token_anchor(s, start_scores)
        if a is not None:
            K = s.wc.block_size
            block = s.wc[a][1] // K
            s.allocator.mark_expanded([(1, block)], K)  # no trade collapses the anchor's block while it cools down
            anchor = (block * K, (block + 1) * K)
    if inf.suffix_guard:  # before the copies: every path, and the unchanged layout, keep the guarded blocks raw
        guarded = suffix_guard_blocks(s, inf.suffix_guard)
        if guarded:
            s.allocator.mark_expanded([(1, b) for b in guarded], s.wc.block_size)
    start_wc, start_allocator = s.wc.copy(), s.allocator.copy()
    # the base's fit of the newest tokens before any edit: the unchanged layout's candidacy
    start_fit = tail_fit_fn() if inf.branches > 1 and inf.branch_unchanged else None
    at_edges: list[tuple] = []  # the anchored zoom's layout once the anchor's edges are open (anchor_path)

    def keep_at_edges(path: RefocusRecord) -> None:
        at_edges.append((path, s.wc.copy(), s.allocator.copy()))
    record, first_scores = zoom(s, scores_fn, start_scores=start_scores, anchor=anchor,
                                on_edges=keep_at_edges if anchor is not None and inf.anchor_path else None)
    if (branched or start_fit is not None) and first_scores:
        record.branch_fits = [tail_fit_fn()]
        margin = inf.branch_margin
        kept, kept_fit = (record, s.wc, s.allocator), record.branch_fits[0] + margin
        for path, wc, allocator in at_edges:  # the zoom cut where the anchored record is open; beats it by the margin
            s.wc, s.allocator = wc, allocator
            record.branch_fits.append(tail_fit_fn())
            if record.branch_fits[-1] > kept_fit:  # the session's layout after the fit, as for every path
                kept, kept_fit = (path, s.wc, s.allocator), record.branch_fits[-1]
                record.branch = len(record.branch_fits) - 1
        gists = sorted((i for i in range(len(start_wc)) if start_wc[i][0] > 0), key=lambda i: -first_scores[i])
        spans = [start_wc.span(i) for i in gists[1:inf.branches]] if branched else []
        if branched and inf.branch_siblings:  # then the children LensNet's zoom passed over, top down
            spans += record.passed_over
        for span in spans:
            s.wc, s.allocator = start_wc.copy(), start_allocator.copy()
            path, _ = zoom(s, scores_fn, focus_span=span)
            record.branch_fits.append(tail_fit_fn())
            if record.branch_fits[-1] > kept_fit:  # strictly: ties keep the earlier path
                kept, kept_fit = (path, s.wc, s.allocator), record.branch_fits[-1]
                record.branch = len(record.branch_fits) - 1
        if start_fit is not None:  # last: ties keep a zoom
            record.branch_fits.append(start_fit)
            if start_fit + (inf.scheduled_margin if scheduled else inf.prompt_margin) > kept_fit:
                kept = (RefocusRecord(num_tokens=s.num_tokens, iterations=0), start_wc, start_allocator)
                record.branch = len(record.branch_fits) - 1
        best, s.wc, s.allocator = kept
        record.iterations, record.edits = best.iterations, best.edits
    if unmarked is not None and not record.edits:
        s.allocator = unmarked
    s.allocator.end_refocus()
    s.tokens_since_refocus = 0
    record.relaid = relaid
    s.refocus_log.append(record)
    if inf.refocus_check and record.edits:  # a zoom was kept, so start_wc / start_allocator are as they started
        # had a scheduled refocus kept no edit it would have left no marks (above): its undoing leaves none either
        no_edit = (unmarked if unmarked is not None else start_allocator).copy()
        no_edit.end_refocus()
        s.check = PendingCheck(record, start_wc, no_edit)
    return record
