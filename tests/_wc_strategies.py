"""Hypothesis strategies shared by the working-context, allocator and variant property tests."""
from __future__ import annotations

from hypothesis import strategies as st

from mc.working_context import WorkingContext


@st.composite
def geometries(draw, max_tokens: int = 400, max_slack: int = 80):
    """``(num_tokens, wc_kwargs)``: random K, max_lod, history and tail, with a budget that fits
    at least the coarsest layout plus up to ``max_slack`` entries."""
    K = draw(st.integers(2, 4))
    max_lod = draw(st.integers(1, 3))
    n = draw(st.integers(0, max_tokens))
    recent = draw(st.integers(0, 30))
    coarse = WorkingContext.build(n, block_size=K, max_lod=max_lod, max_entries=10**9, recent_tokens=recent,
                                  fill=False)
    max_entries = max(1, len(coarse)) + draw(st.integers(0, max_slack))
    return n, dict(block_size=K, max_lod=max_lod, max_entries=max_entries, recent_tokens=recent)
