"""Focus policies the evaluation compares with LensNet: a random control and an oracle.

Owns the refocus of a controller session under scores that do **not** come from LensNet:

* ``random``: uniformly random scores, through the same allocator (same policy, legality, budget
  and cooldown), stopped after exactly as many edits as LensNet's refocus made on the same
  document. It answers "do the scores matter, or only the number of edits and the layout's
  position prior?".
* ``oracle``: scores that single out the entries covering a known span (the needle): +1 there, 0
  elsewhere, with as many iterations as levels, so the span is expanded down to LOD0 and room
  is paid for by trading the cheapest (oldest) sibling groups. It is the upper bound of any focus
  policy at the same entry budget.

Both drive ``session.allocator`` directly with their own scores; neither calls GistNet or
LensNet, so the controller's compiled boundary is untouched. LensNet's own refocus is
``MCController.refocus``.
"""
from __future__ import annotations

import torch

from mc.controller import MCController


def _iterate(ctrl: MCController, scores_fn, *, edit_budget: int, max_iterations: int) -> int:
    """Allocator iterations with ``scores_fn(session) -> [len(wc)]`` until no edit, the budget or the
    iteration cap; then one cooldown tick, as a refocus does. Returns the number of edits applied."""
    s = ctrl.session
    if s is None:
        raise RuntimeError("no session: call controller.begin_session(prompt_ids) first")
    per_iteration = ctrl.cfg.allocator.inference.max_edits
    made = 0
    for _ in range(max_iterations):
        if made >= edit_budget:
            break
        edits = s.allocator.step(s.wc, scores_fn(s), max_edits=min(per_iteration, edit_budget - made))
        made += len(edits)
        if not edits:
            break
    s.allocator.end_refocus()
    s.tokens_since_refocus = 0
    return made


def random_refocus(ctrl: MCController, n_edits: int, generator: torch.Generator) -> int:
    """Refocus the session with uniformly random scores, stopping after ``n_edits`` edits (the
    count LensNet made on the same document). Returns the edits applied (fewer only when the
    random layout runs out of legal edits)."""
    if n_edits <= 0:
        return 0
    inf = ctrl.cfg.allocator.inference
    return _iterate(ctrl, lambda s: torch.rand(len(s.wc), generator=generator) * 2 - 1,
                    edit_budget=n_edits, max_iterations=max(inf.iterations, n_edits))


def span_scores(wc, start: int, end: int) -> torch.Tensor:
    """``[len(wc)]`` scores: 1 for entries overlapping tokens ``[start, end)``, 0 elsewhere."""
    return wc.overlap_mask(start, end)


def oracle_refocus(ctrl: MCController, span: tuple[int, int]) -> int:
    """Expand exactly the entries over ``span`` (the needle's tokens) down to LOD0 within the budget.

    Every iteration scores the entries over the span 1 and the rest 0; the relative allocator then
    expands them (z > 0 only there) and trades the cheapest groups (all equal: the oldest first)
    for room. ``max_lod + 1`` iterations reach LOD0 from the coarsest level. The edit budget is
    what the budget of entries allows, not LensNet's: the oracle is the best layout, not a match
    of LensNet's edit count. Returns the edits applied."""
    if not 0 <= span[0] < span[1]:
        raise ValueError(f"oracle_refocus: span must be a non-empty token range, got {span}")
    return multi_span_oracle_refocus(ctrl, [span])


def multi_span_oracle_refocus(ctrl: MCController, spans: list[tuple[int, int]]) -> int:
    """:func:`oracle_refocus` for several needles at once (a multi-value or variable-tracking document): every
    entry over any of ``spans`` scores 1, so all of them are opened towards LOD0 as far as the budget allows,
    the cheapest (oldest) other groups traded for room. Returns the edits applied."""
    if not spans or any(not 0 <= a < b for a, b in spans):
        raise ValueError(f"multi_span_oracle_refocus: spans must be non-empty token ranges, got {spans}")
    s = ctrl.session
    levels = s.tree.num_levels if hasattr(s.tree, "num_levels") else ctrl.cfg.mc.max_lod + 1
    per_iteration = ctrl.cfg.allocator.inference.max_edits
    width = sum(b - a for a, b in spans)

    def scores(sess) -> torch.Tensor:
        return torch.stack([span_scores(sess.wc, a, b) for a, b in spans]).amax(0)
    return _iterate(ctrl, scores, edit_budget=10 ** 6,
                    max_iterations=(levels + 1) * len(spans) * max(1, width // max(1, per_iteration) + 1))
