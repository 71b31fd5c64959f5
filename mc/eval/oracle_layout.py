"""The oracle's layout: the best working context the entry budget allows around spans known to matter.

Owns :func:`plan_oracle_layout`. The oracle variant of every evaluation (recall documents, the long-range
sweep, the task suite) reads the document through this layout; it is the upper bound a locator is judged
against, so it is built directly rather than through the allocator. Built through the allocator (scores 1
over the needle, relative expand/collapse trades), the oracle stopped wherever the trade rules did: on
SmolLM2's passkey at 8x the budget it never opened the needle's blocks to LOD0 although a layout that
does fits, and on the toy `long` preset LensNet's search beat it in most cells (obsidian Evaluation,
"The oracle").

The plan, from the coarsest layout of the history (every gist as coarse as alignment allows, only the
recent tail at LOD0):

1. open the *core* tokens to LOD0, in order: the tokens that spell the answer inside the needle (a
   caller that knows them passes them; otherwise the needle's own tokens are the core);
2. open the rest of each needle span, left to right, then the question's tokens (usually already in
   the recent tail);
3. spend what is left (``rest``) on the needles' neighbours, one token outward on each side at a time, so the
   needle is read in context rather than as an island among coarse gists (``"neighbours"``); or on the
   newest history, token by token back from the raw tail, as ``WorkingContext.build(fill=True)`` grades a
   layout (``"recent"``); or on the coarsest gists, one level finer at a time, newest first, so the history
   reaches the reader through fewer coarse gists and no raw token is spent beyond the needles and the
   question (``"graded"``). Which reads better depends on the reader: over SmolLM2 at 16x the budget the
   neighbours' plan, which leaves everything between the needle and the question in the coarsest gists, read
   fewer passkeys than the refocus searches did (obsidian Evaluation, "The oracle").

Opening a token expands the entry over it until that entry is LOD0 (coarsest first: a token can only be
reached through its ancestors). Every expansion costs ``K - 1`` entries, so the first one the budget
refuses ends the plan: no later one could fit either. The result always satisfies every working-context
invariant (it is built with ``WorkingContext.expand`` only).
"""
from __future__ import annotations

from bisect import bisect_right
from typing import Iterable, Sequence

from mc.working_context import WorkingContext

Span = tuple[int, int]
ORACLE_RESTS = ("neighbours", "recent", "graded")  # where the plan spends what the needles and the question leave


def _check_spans(spans: Sequence[Span], num_tokens: int, what: str) -> list[Span]:
    out = []
    for sp in spans:
        try:
            a, b = (int(x) for x in sp)
        except (TypeError, ValueError):
            raise ValueError(f"plan_oracle_layout: each of {what} must be a (start, end) token range, "
                             f"got {sp!r}") from None
        if not 0 <= a < b <= num_tokens:
            raise ValueError(f"plan_oracle_layout: {what} {sp!r} is not a non-empty token range inside the history "
                             f"[0, {num_tokens})")
        out.append((a, b))
    return out


def _neighbour_tokens(spans: Sequence[Span], num_tokens: int) -> Iterable[int]:
    """Tokens around ``spans``, nearest first: one step left then one right of every span, then two, ..."""
    for d in range(1, num_tokens):
        stepped = False
        for a, b in spans:
            for t in (a - d, b - 1 + d):
                if 0 <= t < num_tokens:
                    stepped = True
                    yield t
        if not stepped:
            return


def plan_oracle_layout(wc: WorkingContext, spans: Sequence[Span], *, core: Sequence[Span] = (),
                       question: Span | None = None, rest: str = "neighbours"
                       ) -> tuple[WorkingContext, list[tuple[int, int]]]:
    """The oracle's layout for the history ``wc`` covers (same geometry, same depth ``wc.max_lod``).

    ``spans``: the needles' token ranges, most important first; ``core``: the answer's tokens inside them
    (opened first; defaults to the spans themselves); ``question``: the question's tokens (opened after the
    needles); ``rest``: one of :data:`ORACLE_RESTS`, where what is left goes (the module docstring). Returns
    ``(layout, expanded)``: a new working context (``wc`` is not modified) and the nodes the plan opened for the
    needles, the core and the question (an ``(lod, index)`` per expansion's parent), which the caller protects
    from ``make_room`` while it decodes (see :func:`mc.eval.focus_policies`). ValueError for an empty or
    out-of-range span."""
    if rest not in ORACLE_RESTS:
        raise ValueError(f"plan_oracle_layout: rest must be one of {ORACLE_RESTS}, got {rest!r}")
    spans = _check_spans(spans, wc.num_tokens, "spans")
    if not spans:
        raise ValueError("plan_oracle_layout: at least one needle span is required")
    core = _check_spans(core, wc.num_tokens, "core")
    q = _check_spans([question], wc.num_tokens, "question") if question is not None else []
    plan = WorkingContext.build(wc.num_tokens, block_size=wc.block_size, max_lod=wc.max_lod,
                                max_entries=wc.max_entries, recent_tokens=wc.recent_tokens, fill=False)
    protected: list[tuple[int, int]] = []
    starts = plan.starts()  # ascending (the entries tile the history in time order); redone after each expansion

    def open_token(t: int, protect: bool) -> bool:
        """Expand the entry over token ``t`` until it is LOD0; False when the budget refuses an expansion."""
        nonlocal starts
        while True:
            i = bisect_right(starts, t) - 1
            lod, idx = plan[i]
            if lod == 0:
                return True
            if plan.check_expand(i) is not None:
                return False
            plan.expand(i)
            starts = plan.starts()
            if protect:
                protected.append((lod, idx))

    def open_all(tokens: Iterable[int], protect: bool) -> bool:
        return all(open_token(t, protect) for t in tokens)

    def refine_coarsest() -> None:
        """Expand the newest of the coarsest gists, again and again, until none is left or the budget refuses."""
        while True:
            lods = [lod for lod, _ in plan]
            top = max(lods)
            newest = len(lods) - 1 - lods[::-1].index(top)
            if top == 0 or plan.check_expand(newest) is not None:
                return
            plan.expand(newest)

    needle_tokens = [t for a, b in (core or spans) for t in range(a, b)]
    needle_tokens += [t for a, b in spans + q for t in range(a, b)]
    if open_all(needle_tokens, True):
        if rest == "graded":
            refine_coarsest()
        else:
            newest_first = range(plan.num_tokens - 1, -1, -1)
            open_all(_neighbour_tokens(spans, plan.num_tokens) if rest == "neighbours" else newest_first, False)
    # Expansions only, each checked by WorkingContext.expand: the invariants hold; validate is the cheap guard
    # that they still do if this function changes.
    plan.validate()
    return plan, protected
