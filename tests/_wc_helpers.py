"""Shared by the working-context, allocator and variant tests: an independent invariant check
and the hypothesis geometry strategy."""
from __future__ import annotations

from hypothesis import strategies as st

from mc.working_context import WorkingContext


def check_invariants(wc: WorkingContext) -> None:
    """Independent of WorkingContext.validate: recomputes every invariant from the raw entries."""
    K, tail = wc.block_size, max(0, wc.num_tokens - wc.recent_tokens)
    pos = 0
    for lod, idx in wc.entries:
        assert 0 <= lod <= wc.max_lod
        w = K**lod
        start = idx * w
        assert start == pos, "tiling: gap or overlap"
        assert start % w == 0, "alignment"
        assert start + w <= wc.num_tokens, "incomplete block"
        if lod > 0:
            assert start + w <= tail, "gist inside the recent tail"
        pos = start + w
    assert pos == wc.num_tokens, "tiling: history not covered"
    assert len(wc) <= wc.max_entries, "budget"


@st.composite
def geometries(draw, max_tokens: int = 400, max_slack: int = 80, max_recent: int = 30):
    """``(num_tokens, wc_kwargs)``: random K, max_lod, history and tail, with a budget that fits
    at least the coarsest layout plus up to ``max_slack`` entries."""
    K = draw(st.integers(2, 4))
    max_lod = draw(st.integers(1, 3))
    n = draw(st.integers(0, max_tokens))
    recent = draw(st.integers(0, max_recent))
    coarse = WorkingContext.build(n, block_size=K, max_lod=max_lod, max_entries=10**9, recent_tokens=recent,
                                  fill=False)
    max_entries = max(1, len(coarse)) + draw(st.integers(0, max_slack))
    return n, dict(block_size=K, max_lod=max_lod, max_entries=max_entries, recent_tokens=recent)
