"""Focus allocator: any scores give legal, non-overlapping, in-budget edits under both policies (relative
z-scores, absolute thresholds); scale invariance of the relative policy; cooldown; recent tail."""
from __future__ import annotations

import math
import random

import pytest
import torch
from hypothesis import given, settings, strategies as st

from _wc_helpers import check_invariants, geometries  # shared (tests/_wc_helpers.py)
from mc.allocator import Edit, FocusAllocator, standardize
from mc.config import AllocatorConfig
from mc.working_context import WorkingContext


class Shadow:
    """Test-side record of applied edits, to check the cooldown independently of the allocator."""

    def __init__(self, cooldown):
        self.cooldown, self.clock, self.made_by_expand, self.made_by_collapse = cooldown, 0, {}, {}

    def record(self, wc_before, edits, K):
        for e in edits:
            lod, idx = e.entry
            if e.kind == "expand":
                for j in range(K):
                    self.made_by_expand[(lod - 1, idx * K + j)] = self.clock
            else:
                self.made_by_collapse[(lod + 1, idx // K)] = self.clock

    def blocks_expand(self, node):
        c = self.made_by_collapse.get(node)
        return c is not None and self.clock - c < self.cooldown

    def blocks_collapse(self, nodes):
        return any((c := self.made_by_expand.get(n)) is not None and self.clock - c < self.cooldown for n in nodes)


@st.composite
def random_wc(draw):
    n, geo = draw(geometries(max_tokens=250, max_slack=50))
    wc = WorkingContext.build(n, fill=draw(st.booleans()), **geo)
    rng = random.Random(draw(st.integers(0, 10**6)))
    for _ in range(20):  # diversify the layout
        legal = [("expand", i) for i in range(len(wc)) if wc.check_expand(i) is None]
        legal += [("collapse", i) for i in range(len(wc)) if wc.check_collapse(i) is None]
        if legal:
            kind, i = rng.choice(legal)
            getattr(wc, kind)(i)
    return wc


def check_selection(wc, edits, scores, cfg, max_edits, shadow, alloc):
    """Legality, budget, cooldown and the policy's own rule for every chosen edit."""
    K = wc.block_size
    relative = cfg.policy == "relative"
    if relative:  # the relative policy decides on per-kind z-scores: check its rule on them
        z_gist, z_groups = alloc.relative_view(wc, list(scores))
        z_group = {g: z for z, g in z_groups}
    exp_t = cfg.expand_z if relative else cfg.expand_threshold
    margin = cfg.trade_margin_z if relative else cfg.collapse_threshold
    assert len(edits) <= max_edits
    kinds = [e.kind for e in edits]
    assert kinds == sorted(kinds, key=lambda k: k != "collapse"), "collapses must come first"
    touched = set()
    for e in edits:
        assert wc[e.index] == e.entry
        if e.kind == "expand":
            lod, _ = e.entry
            if relative and cfg.expand_top:  # below expand_z only as one of the expand_top leaders, with z > 0
                open_z = sorted((z for i, z in z_gist.items() if not shadow.blocks_expand(wc[i])), reverse=True)
                leader = z_gist[e.index] > 0 and z_gist[e.index] >= open_z[min(cfg.expand_top, len(open_z)) - 1] - 1e-9
                assert lod > 0 and (z_gist[e.index] >= exp_t - 1e-9 or leader)
            else:
                assert lod > 0 and (z_gist[e.index] if relative else scores[e.index]) >= exp_t - 1e-9
            assert not shadow.blocks_expand(e.entry), "expand undoes a cooling collapse"
            span = {e.index}
        else:
            assert wc.check_collapse(e.index) is None  # aligned siblings, outside the recent tail
            group = range(e.index, e.index + K)
            mean = sum(scores[j] for j in group) / K
            # Either the group asks to collapse, or it is a trade for an expansion it is cheaper than.
            if relative:  # nothing is collapsed for its own sake: only to pay for an expansion
                best_expand = max((z_gist[x.index] for x in edits if x.kind == "expand"), default=-math.inf)
                assert z_group[e.index] <= best_expand - margin + 1e-9
            else:
                best_expand = max((scores[x.index] for x in edits if x.kind == "expand"), default=-math.inf)
                assert mean <= -margin or mean <= best_expand - margin + 1e-9
            assert not shadow.blocks_collapse([wc[j] for j in group]), "collapse undoes a cooling expand"
            span = set(group)
        assert not span & touched, "overlapping edits in one iteration"
        touched |= span
    n_exp = kinds.count("expand")
    assert len(wc) + (K - 1) * (n_exp - kinds.count("collapse")) <= wc.max_entries


@settings(max_examples=50, deadline=None)
# allow_subnormal=False: `import mc` flushes subnormal floats (mc/denormals.py), which Hypothesis refuses to draw then.
@given(wc=random_wc(), exp_t=st.floats(0, 0.9, allow_subnormal=False), col_t=st.floats(0, 0.9, allow_subnormal=False),
       cooldown=st.integers(0, 3),
       max_edits=st.integers(0, 8), seed=st.integers(0, 10**6), as_tensor=st.booleans(), pad=st.integers(0, 3),
       policy=st.sampled_from(["relative", "absolute"]), top=st.integers(0, 2))
def test_any_scores_give_only_legal_edits(wc, exp_t, col_t, cooldown, max_edits, seed, as_tensor, pad, policy, top):
    cfg = AllocatorConfig(policy=policy, expand_threshold=exp_t, collapse_threshold=col_t, expand_z=2 * exp_t,
                          trade_margin_z=2 * col_t, cooldown=cooldown, expand_top=top)
    alloc = FocusAllocator(cfg)
    shadow = Shadow(cooldown)
    g = torch.Generator().manual_seed(seed)
    K = wc.block_size
    for it in range(12):  # several refocuses: cooldown marks accumulate and expire
        raw = torch.rand(len(wc) + pad, generator=g) * 2 - 1  # [W (+ padding)]
        if it % 3 == 1:
            raw = raw.sign()  # extreme scores: everything wants an edit
        scores = raw if as_tensor else raw.tolist()
        edits = alloc.select(wc, scores, max_edits=max_edits)
        check_selection(wc, edits, raw[: len(wc)].tolist(), cfg, max_edits, shadow, alloc)
        # Maximality: a qualifying expansion that fits the free budget is never ignored entirely.
        free = wc.max_entries - len(wc)
        if policy == "relative":
            vals = alloc.relative_view(wc, raw[: len(wc)].tolist())[0]
        else:
            vals = dict(enumerate(raw[: len(wc)].tolist()))
        want = [i for i, (lod, _) in enumerate(wc.entries)
                if lod > 0 and vals[i] >= (cfg.expand_z if policy == "relative" else exp_t)
                and not shadow.blocks_expand(wc[i])]
        if want and free >= K - 1 and max_edits > 0:
            assert edits, "a qualifying expansion with room was not chosen"
        before = wc.copy()
        tail = before.tail_start()
        alloc.apply(wc, edits)
        shadow.record(before, edits, K)
        check_invariants(wc)
        assert [e for e in wc.entries if e[1] * K ** e[0] >= tail] == [e for e in before.entries
                                                                      if e[1] * K ** e[0] >= tail]
        for e in edits:
            lod, idx = e.entry
            if e.kind == "expand":
                assert (lod - 1, idx * K) in wc.entries
            else:
                assert (lod + 1, idx // K) in wc.entries
        if it % 2:
            alloc.end_refocus()
            shadow.clock += 1


def tiny(max_entries=20, recent=2, cooldown=2, **kw):
    """K=2, max_lod=2, 16 tokens: coarse layout [(2,0),(2,1),(2,2),(1,6),(0,14),(0,15)]."""
    wc = WorkingContext.build(16, block_size=2, max_lod=2, max_entries=max_entries, recent_tokens=recent, fill=False)
    kw.setdefault("policy", "absolute")  # these tests pin the threshold rules; the relative policy has its own
    cfg = AllocatorConfig(expand_threshold=0.5, collapse_threshold=0.5, cooldown=cooldown, **kw)
    return wc, FocusAllocator(cfg)


def test_thresholds():
    wc, alloc = tiny()
    assert wc.entries == [(2, 0), (2, 1), (2, 2), (1, 6), (0, 14), (0, 15)]
    assert alloc.select(wc, [0.49, 0.2, -0.9, 0.0, 1.0, 1.0], max_edits=5) == []  # LOD0 never expands
    edits = alloc.select(wc, [0.5, 0.2, 0.9, 0.0, 1.0, 1.0], max_edits=5)
    assert [(e.kind, e.index) for e in edits] == [("expand", 2), ("expand", 0)]  # strongest first
    assert len(alloc.select(wc, [0.5, 0.2, 0.9, 0.0, 1.0, 1.0], max_edits=1)) == 1


def test_cooldown_blocks_flip_back_then_expires():
    wc, alloc = tiny(cooldown=2)
    alloc.step(wc, [0.0, 0.0, 0.0, 0.9, 0.0, 0.0], max_edits=4)  # expand (1,6) -> (0,12), (0,13)
    assert wc.entries[3:5] == [(0, 12), (0, 13)]
    flip = [0.0, 0.0, 0.0, -1.0, -1.0, 0.0, 0.0]
    for _ in range(2):  # blocked in this refocus and the next one
        assert alloc.select(wc, flip, max_edits=4) == []
        alloc.end_refocus()
    assert [(e.kind, e.index) for e in alloc.select(wc, flip, max_edits=4)] == [("collapse", 3)]
    alloc.step(wc, flip, max_edits=4)  # collapse back into (1, 6)
    assert alloc.select(wc, [0.0, 0.0, 0.0, 0.9, 0.0, 0.0], max_edits=4) == []  # re-expand is blocked now
    with pytest.raises(ValueError, match="cooldown"):
        alloc.apply(wc, [Edit("expand", (1, 6), 3)])
    alloc.apply(wc, [Edit("expand", (1, 6), 3)], respect_cooldown=False)
    # Further zooming in the same direction is not a flip back: a fresh child may expand again.
    wc2, alloc2 = tiny(cooldown=5)
    alloc2.step(wc2, [0.9, 0, 0, 0, 0, 0], max_edits=1)  # (2,0) -> (1,0), (1,1)
    assert [(e.kind, e.entry) for e in alloc2.select(wc2, [0.9] + [0] * 6, max_edits=1)] == [("expand", (1, 0))]


def test_cooldown_zero_allows_immediate_flip():
    wc, alloc = tiny(cooldown=0)
    alloc.step(wc, [0.0, 0.0, 0.0, 0.9, 0.0, 0.0], max_edits=4)
    assert len(alloc.select(wc, [0.0, 0.0, 0.0, -1.0, -1.0, 0.0, 0.0], max_edits=4)) == 1


def test_collapse_makes_room_before_expanding():
    wc, alloc = tiny(max_entries=9)
    wc.expand(0)  # (1,0),(1,1),(2,1),(2,2),(1,6),(0,14),(0,15): 7 entries
    wc.expand(0)  # (0,0),(0,1),(1,1),... : 8 entries; one more expansion fits (9)
    wc.expand(3)  # expand (2,1) -> (1,2),(1,3): 9 entries, full
    assert len(wc) == 9
    scores = [-0.9, -0.9, 0.0, 0.0, 0.0, 0.95, 0.0, 0.0, 0.0]  # group (0,0),(0,1) collapses; (2,2) expands
    assert alloc.select(wc, scores, max_edits=1) == [Edit("collapse", (0, 0), 0)]  # the expand waits for room
    edits = alloc.select(wc, scores, max_edits=2)
    assert [(e.kind, e.entry) for e in edits] == [("collapse", (0, 0)), ("expand", (2, 2))]
    alloc.apply(wc, edits)
    check_invariants(wc)
    assert len(wc) == 9
    # Full, and no sibling group outside the tail can collapse: nothing can be expanded.
    wc2, alloc2 = tiny(max_entries=6)
    assert alloc2.select(wc2, [0.9, 0.9, 0.9, 0.9, 0.0, 0.0], max_edits=4) == []


def test_trade_moves_detail_to_where_it_is_wanted_more():
    wc, alloc = tiny(max_entries=9)
    wc.expand(0)
    wc.expand(0)
    wc.expand(3)  # full: (0,0),(0,1),(1,1),(1,2),(1,3),(2,2),(1,6),(0,14),(0,15)
    # No group asks to collapse (all means > -0.5), but (2,2) wants detail far more than
    # the group (0,0),(0,1) (mean 0.0 <= 0.95 - 0.5): a trade.
    scores = [0.0, 0.0, 0.1, 0.1, 0.1, 0.95, 0.1, 0.0, 0.0]
    edits = alloc.select(wc, scores, max_edits=2)
    assert [(e.kind, e.entry) for e in edits] == [("collapse", (0, 0)), ("expand", (2, 2))]
    assert alloc.select(wc, scores, max_edits=1) == []  # a trade needs two edits
    # Within the margin: no churn between near-equal scores.
    near = [0.3, 0.3, 0.1, 0.3, 0.3, 0.7, 0.1, 0.0, 0.0]  # both groups: mean 0.3 > 0.7 - 0.5
    assert alloc.select(wc, near, max_edits=4) == []
    alloc.apply(wc, edits)
    check_invariants(wc)
    assert len(wc) == 9


def test_apply_locates_edits_by_identity():
    wc, alloc = tiny(max_entries=40)
    edits = alloc.select(wc, [0.9, 0.8, 0.7, 0.6, 0.0, 0.0], max_edits=4)
    assert len(edits) == 4
    alloc.apply(wc, edits)  # index shifts after the first expand are handled
    assert wc.lods() == [1] * 6 + [0] * 4
    with pytest.raises(ValueError, match="no longer"):
        alloc.apply(wc, [Edit("expand", (2, 0), 0)])


def test_scores_validation():
    wc, alloc = tiny()
    with pytest.raises(ValueError, match="1-D"):
        alloc.select(wc, torch.zeros(1, 6), max_edits=1)
    with pytest.raises(ValueError, match="scores for a working context"):
        alloc.select(wc, [0.0] * 5, max_edits=1)
    with pytest.raises(ValueError, match="NaN"):
        alloc.select(wc, [float("nan")] * 6, max_edits=1)
    with pytest.raises(ValueError, match="max_edits"):
        alloc.select(wc, [0.0] * 6, max_edits=-1)


def test_make_room_lowest_score_then_oldest():
    wc, alloc = tiny(max_entries=40)
    for i in (2, 1, 0):
        wc.expand(i)  # all LOD2 expanded -> 6 LOD1 + (1,6) + tail
    assert wc.lods() == [1] * 7 + [0, 0]
    edits = alloc.make_room(wc, 0)
    assert edits == []
    wc.max_entries = 9
    edits = alloc.make_room(wc, 1, scores=[0.5, 0.5, 0.1, 0.1, -0.5, -0.6, 0.0, 0.0, 0.0])
    assert [(e.kind, e.entry) for e in edits] == [("collapse", (1, 4))]  # lowest mean
    assert len(wc) + 1 <= 9
    edits = alloc.make_room(wc, 2)
    assert [(e.kind, e.entry) for e in edits] == [("collapse", (1, 0))]  # oldest without scores
    with pytest.raises(ValueError, match="cannot fit"):
        alloc.make_room(wc, 8)


@settings(max_examples=40, deadline=None)
@given(wc=random_wc(), n_new=st.integers(0, 60), use_scores=st.booleans(), seed=st.integers(0, 1000))
def test_make_room_property(wc, n_new, use_scores, seed):
    alloc = FocusAllocator(AllocatorConfig(cooldown=2))
    scores = torch.rand(len(wc), generator=torch.Generator().manual_seed(seed)) if use_scores else None
    geometry = dict(block_size=wc.block_size, max_lod=wc.max_lod, recent_tokens=wc.recent_tokens)
    floor = len(WorkingContext.build(wc.num_tokens, max_entries=10**9, fill=False, **geometry))
    before = wc.copy()
    if floor + n_new > wc.max_entries:
        with pytest.raises(ValueError, match="cannot fit"):
            alloc.make_room(wc, n_new, scores)
        return
    edits = alloc.make_room(wc, n_new, scores)
    check_invariants(wc)
    assert len(wc) + n_new <= wc.max_entries
    assert len(wc) == len(before) - (wc.block_size - 1) * len(edits)
    assert all(e.kind == "collapse" for e in edits)
    if len(before) + n_new <= wc.max_entries:
        assert edits == []  # no needless collapse
    else:
        assert len(wc) + n_new + wc.block_size - 1 > wc.max_entries  # stops as soon as it fits
    wc.append_tokens(n_new)
    check_invariants(wc)


# ----------------------------------------------------------------------------- the relative policy


def test_standardize_is_invariant_to_positive_affine_maps():
    vals = [0.1, -0.3, 0.25, 0.0, 0.9, -0.05]
    for a, b in ((1.0, 0.0), (0.01, -0.4), (7.0, 3.0)):
        assert standardize([a * v + b for v in vals]) == pytest.approx(standardize(vals), abs=1e-6)
    assert standardize([0.3] * 5) == [0.0] * 5  # constant scores: no preference at all
    assert standardize([]) == []


@settings(max_examples=30, deadline=None)
# allow_subnormal=False: `import mc` flushes subnormal floats (mc/denormals.py), which Hypothesis refuses to draw then.
@given(wc=random_wc(), seed=st.integers(0, 10**6), a=st.floats(1e-3, 50.0), b=st.floats(-5.0, 5.0, allow_subnormal=False),
       max_edits=st.integers(1, 8))
def test_relative_edits_do_not_depend_on_the_score_scale(wc, seed, a, b, max_edits):
    """The knife edge this policy removes: the same ranking at any scale/shift gives the same edits."""
    alloc = FocusAllocator(AllocatorConfig(policy="relative", cooldown=2))
    raw = (torch.rand(len(wc), generator=torch.Generator().manual_seed(seed)) * 2 - 1).tolist()
    ref = alloc.select(wc, raw, max_edits=max_edits)
    assert alloc.select(wc, [a * v + b for v in raw], max_edits=max_edits) == ref


def test_relative_expands_the_top_gist_even_when_every_score_is_small():
    """Scores all under the absolute thresholds (the failure seen in the field): absolute does
    nothing, relative still moves detail to the clearly top-ranked gist, paid for by a trade."""
    wc, _ = tiny(max_entries=7)
    wc.expand(0)  # full: [(1,0),(1,1),(2,1),(2,2),(1,6),(0,14),(0,15)]; K=2
    scores = [0.01, 0.012, 0.011, 0.15, 0.011, 0.01, 0.01]  # (2,2) ranks far above the rest, all below 0.2
    absolute = FocusAllocator(AllocatorConfig(policy="absolute", cooldown=2))
    relative = FocusAllocator(AllocatorConfig(policy="relative", cooldown=2))
    assert absolute.select(wc, scores, max_edits=4) == []
    edits = relative.select(wc, scores, max_edits=4)
    assert [(e.kind, e.entry) for e in edits] == [("collapse", (1, 0)), ("expand", (2, 2))]
    relative.apply(wc, edits)
    check_invariants(wc)
    assert len(wc) <= wc.max_entries


def test_relative_trade_margin_and_no_collapse_for_its_own_sake():
    wc, _ = tiny(max_entries=40)  # lots of room: expansions need no trade
    alloc = FocusAllocator(AllocatorConfig(policy="relative", expand_z=1.0, trade_margin_z=1.0, cooldown=2))
    edits = alloc.select(wc, [-0.9, 0.0, 0.9, 0.0, 0.0, 0.0], max_edits=4)
    assert [(e.kind, e.entry) for e in edits] == [("expand", (2, 2))]  # the low group is left alone
    full, _ = tiny(max_entries=7)
    full.expand(0)  # [(1,0),(1,1),(2,1),(2,2),(1,6),(0,14),(0,15)]: the one legal group is (1,0),(1,1)
    # (2,2) tops the ranking but its lead over the cheapest group is < trade_margin_z: no churn.
    z_near = [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    z = standardize(z_near)
    assert z[3] >= 1.0 and z[3] - (z[0] + z[1]) / 2 < 3.0
    strict = FocusAllocator(AllocatorConfig(policy="relative", expand_z=1.0, trade_margin_z=3.0, cooldown=2))
    assert strict.select(full, z_near, max_edits=4) == []
    assert len(alloc.select(full, z_near, max_edits=4)) == 2  # within the default margin: a trade


def test_expand_top_zooms_the_leader_of_a_flat_field_and_constant_scores_still_do_nothing():
    """Multi-level refocus (obsidian Focus Allocator, expand_top): after an expansion the needle's
    child leads a field of similar gists with a small z; expand_z alone leaves it, expand_top=1 zooms it."""
    wc, _ = tiny(max_entries=40)  # room to spare: no trade needed
    gists = [i for i, (lod, _) in enumerate(wc.entries) if lod > 0]
    scores = [0.9] * len(wc)
    for i in gists[: len(gists) // 3]:
        scores[i] = -1.0  # a block of gists LensNet rules out
    leader = gists[-1]
    scores[leader] = 0.96
    z = dict(zip(gists, standardize([scores[i] for i in gists])))
    assert 0 < z[leader] < 1.0  # ranks first, yet under expand_z
    plain = FocusAllocator(AllocatorConfig(policy="relative", expand_z=1.0, cooldown=2))
    top = FocusAllocator(AllocatorConfig(policy="relative", expand_z=1.0, cooldown=2, expand_top=1))
    assert plain.select(wc, scores, max_edits=2) == []
    assert [(e.kind, e.index) for e in top.select(wc, scores, max_edits=2)] == [("expand", leader)]
    assert top.select(wc, [0.3] * len(wc), max_edits=2) == []  # constant scores: z = 0, no edit
