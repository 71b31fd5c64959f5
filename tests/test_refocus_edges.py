"""Edge first (``allocator.inference.edge_first``): once a zoom has opened a block to LOD0, its next
expansion (``edge_sides``: one or both sides, more grow the run outward) is the bordering gist LensNet scores
highest, inside the same edit budget; descend first (``allocator.inference.descend_first``): an opened LOD >= 2
gist's best-scored child is expanded next. Hand-made scores on a tiny controller (K=4, two levels), so which
entry must move is known exactly."""
from __future__ import annotations

import pytest
import torch

from _tiny_config import K, SCENARIO, TINY
from mc.build import build_controller
from mc.config import ConfigError
from mc.config_loading import load_config
from mc.refocus import edge_gists, zoom

OVERRIDES = TINY + SCENARIO + ["allocator.expand_top=1", "allocator.trade_margin_z=0.0",
                               "allocator.inference.iterations=4", "allocator.inference.max_edits=2",
                               "allocator.inference.edit_budget=6"]
TARGET = 101  # a token far from the recent tail, inside the LOD1 block [100, 104) and the LOD2 gist [96, 112)
FAR = 20  # a token under another LOD2 gist, which the scores below rank second after the target


def _session(edge_first: bool, budget: int = 6, extra: tuple[str, ...] = ()):
    ctrl = build_controller(load_config(OVERRIDES + [f"allocator.inference.edge_first={edge_first}",
                                                     f"allocator.inference.edit_budget={budget}", *extra]),
                            device=torch.device("cpu"))
    ctrl.begin_session(torch.randint(0, 256, (200,), generator=torch.Generator().manual_seed(0)))
    return ctrl.session


def _scores(right: float, left: float, far: float = 0.8):
    """1 on the entries over TARGET, ``right`` / ``left`` on the entries over the block after / before its
    block, ``far`` over FAR, 0 elsewhere: a record that runs on across a block's edge, and a distractor."""
    lo = TARGET // K * K

    def fn(s):
        wc = s.wc
        on_target = wc.overlap_mask(TARGET, TARGET + 1)
        return (on_target + (1 - on_target) * (right * wc.overlap_mask(lo + K, lo + 2 * K)
                                              + left * wc.overlap_mask(lo - K, lo))
                + far * wc.overlap_mask(FAR, FAR + 1))
    return fn


def _lod_at(s, token: int) -> int:
    return next(s.wc[i][0] for i in range(len(s.wc)) if s.wc.span(i)[0] <= token < s.wc.span(i)[1])


def test_the_plain_zoom_spends_its_last_expansion_on_the_distractor():
    s = _session(False)
    assert _lod_at(s, TARGET) == 2 and _lod_at(s, FAR) == 2
    rec, _ = zoom(s, _scores(right=0.5, left=0.0))
    assert _lod_at(s, TARGET) == 0 and _lod_at(s, TARGET // K * K + K) == 1  # the record's second block: a gist
    assert _lod_at(s, FAR) == 1 and len(rec.edits) == 6


@pytest.mark.parametrize("right,left,opened", [(0.5, 0.0, +1), (0.0, 0.5, -1), (0.3, 0.2, +1)])
def test_edge_first_opens_the_higher_scored_bordering_block(right, left, opened):
    s, plain = _session(True), _session(False)
    rec, _ = zoom(s, _scores(right, left))
    base, _ = zoom(plain, _scores(right, left))
    lo = TARGET // K * K
    neighbour, other = lo + opened * K, lo - opened * K
    assert [(e.kind, e.entry) for e in rec.edits[:4]] == [(e.kind, e.entry) for e in base.edits[:4]]  # same path down
    assert [e.entry for e in rec.edits if e.kind == "expand"][-1] == (1, neighbour // K)
    assert len(rec.edits) <= 6  # the same edit budget
    assert [_lod_at(s, t) for t in (TARGET, neighbour, other, FAR)] == [0, 0, 1, 2]
    assert len(s.wc) <= s.wc.max_entries
    s.wc.validate()


def test_one_edge_per_zoom_then_lensnets_own_ranking():
    s = _session(True, budget=8)
    rec, _ = zoom(s, _scores(right=0.5, left=0.3))
    lo = TARGET // K * K
    expands = [e.entry for e in rec.edits if e.kind == "expand"]
    assert expands[2] == (1, lo // K + 1)  # the edge, right after the block opened
    assert (1, lo // K - 1) not in expands  # the other edge (0.3) is not walked to: the distractor (0.8) is next
    assert _lod_at(s, FAR) < 2 and _lod_at(s, lo - K) == 1
    s.wc.validate()


def test_nothing_changes_before_a_block_is_open():
    s, plain = _session(True, budget=4), _session(False, budget=4)  # two levels down: the block opens last
    rec, _ = zoom(s, _scores(right=0.5, left=0.0))
    base, _ = zoom(plain, _scores(right=0.5, left=0.0))
    assert [(e.kind, e.entry) for e in rec.edits] == [(e.kind, e.entry) for e in base.edits]
    assert s.wc.entries == plain.wc.entries


def test_edge_gists_are_the_gists_that_border_an_opened_block():
    s = _session(False)
    rec, _ = zoom(s, _scores(right=0.5, left=0.0))
    lo = TARGET // K * K
    assert sorted(s.wc[i] for i in edge_gists(s, rec.edits)) == [(1, lo // K - 1), (1, lo // K + 1)]
    assert edge_gists(s, []) == []


def test_edge_first_must_be_a_boolean():
    with pytest.raises(ConfigError, match="edge_first"):
        load_config(OVERRIDES + ["allocator.inference.edge_first=maybe"])


def test_edge_sides_2_opens_both_sides_of_the_first_block():
    s = _session(True, budget=8, extra=("allocator.inference.edge_sides=2",))
    rec, _ = zoom(s, _scores(right=0.5, left=0.3))
    lo = TARGET // K * K
    expands = [e.entry for e in rec.edits if e.kind == "expand"]
    assert expands[2:] == [(1, lo // K + 1), (1, lo // K - 1)]  # the higher-scored side first, then the other
    assert [_lod_at(s, t) for t in (lo - K, TARGET, lo + K, FAR)] == [0, 0, 0, 2]  # the distractor never opens
    assert len(rec.edits) <= 8
    s.wc.validate()


ROOMY = ("mc.max_entries=48", "mc.bucket_ladder=[16,48]")  # room for six trades: TINY's 32 entries fill after four


def _sentence(s):
    """A record over four blocks: TARGET's block 1, the next 0.5, the one after 0.4, the one before 0.3, the one
    before that 0.2 (under another LOD2 gist); the distractor 0.8 over FAR."""
    lo, wc = TARGET // K * K, s.wc
    on_target = wc.overlap_mask(TARGET, TARGET + 1)
    rest = sum(v * wc.overlap_mask(lo + d * K, lo + (d + 1) * K) for d, v in ((1, 0.5), (2, 0.4), (-1, 0.3), (-2, 0.2)))
    return on_target + (1 - on_target) * rest + 0.8 * wc.overlap_mask(FAR, FAR + 1)


@pytest.mark.parametrize("sides", [2, 4])
def test_edge_sides_above_2_grow_the_opened_run_outward(sides):
    s = _session(True, budget=12, extra=(f"allocator.inference.edge_sides={sides}", "allocator.inference.iterations=6",
                                         *ROOMY))
    rec, _ = zoom(s, _sentence)
    lo, b = TARGET // K * K, TARGET // K
    expands = [e.entry for e in rec.edits if e.kind == "expand"]
    assert expands[2:4] == [(1, b + 1), (1, b - 1)]  # both sides of the first block, as with edge_sides=2
    if sides == 2:  # then LensNet's own ranking: the distractor
        assert _lod_at(s, FAR) < 2 and _lod_at(s, lo + 2 * K) == 1
    else:  # then the run [lo - K, lo + 2K) grows: its better-scored border, then the next one out
        assert expands[4:6] == [(1, b + 2), (2, (lo - 2 * K) // K**2)]
        assert [_lod_at(s, t) for t in (lo - K, TARGET, lo + K, lo + 2 * K, FAR)] == [0, 0, 0, 0, 2]
        assert _lod_at(s, lo - 2 * K) == 1  # an LOD2 border opens one level per expansion
    assert len(rec.edits) <= 12 and len(s.wc) <= s.wc.max_entries
    s.wc.validate()


def test_edge_gists_grow_only_when_asked_and_both_sides_are_open():
    s = _session(True, budget=8, extra=("allocator.inference.edge_sides=2", *ROOMY))
    rec, _ = zoom(s, _sentence)
    b = TARGET // K
    assert edge_gists(s, rec.edits) == []  # both sides of the first block are open: nothing borders it
    assert sorted(s.wc[i] for i in edge_gists(s, rec.edits, grow=True)) == [(1, b + 2), (2, (b - 2) // K)]


def _coarse_first(child: float, sibling: float = 0.0):
    """The gist over TARGET scores 1 at LOD2 but ``child`` at LOD1 (under the distractor's 0.8 over FAR); the
    LOD1 gist of the block after TARGET's (same LOD2 parent) scores ``sibling``: LensNet that finds the region
    but is less sure of the block."""
    lo = TARGET // K * K

    def fn(s):
        wc = s.wc
        out = 0.8 * wc.overlap_mask(FAR, FAR + 1)
        for i in range(len(wc)):
            a, b = wc.span(i)
            if a <= TARGET < b and wc[i][0] > 0:
                out[i] = 1.0 if wc[i][0] == 2 else child
            elif wc[i] == (1, lo // K + 1):
                out[i] = sibling
        return out
    return fn


def test_descend_first_finishes_the_path_it_started():
    plain = _session(False, budget=4)
    zoom(plain, _coarse_first(child=0.3))
    assert _lod_at(plain, TARGET) == 1 and _lod_at(plain, FAR) == 1  # two half paths, no block open
    s = _session(False, budget=4, extra=("allocator.inference.descend_first=true",))
    rec, _ = zoom(s, _coarse_first(child=0.3))
    assert [e.entry for e in rec.edits if e.kind == "expand"] == [(2, TARGET // K**2), (1, TARGET // K)]
    assert _lod_at(s, TARGET) == 0 and _lod_at(s, FAR) == 2
    s.wc.validate()


def test_descend_first_takes_the_best_scored_child():
    s = _session(False, budget=4, extra=("allocator.inference.descend_first=true",))
    rec, _ = zoom(s, _coarse_first(child=0.3, sibling=0.5))
    assert [e.entry for e in rec.edits if e.kind == "expand"][-1] == (1, TARGET // K + 1)
    assert _lod_at(s, TARGET) == 1 and _lod_at(s, FAR) == 2


@pytest.mark.parametrize("override,field", [("allocator.inference.edge_sides=65", "edge_sides"),
                                            ("allocator.inference.edge_sides=0", "edge_sides"),
                                            ("allocator.inference.descend_first=maybe", "descend_first")])
def test_edge_sides_and_descend_first_are_checked(override, field):
    with pytest.raises(ConfigError, match=field):
        load_config(OVERRIDES + [override])


# ---------------------------------------------------------------- sibling branches (allocator.inference.branch_siblings)

def _target_fit(s) -> float:
    """A stand-in for the base's fit of the question: good only when TARGET's block is open (the record read)."""
    return 0.0 if _lod_at(s, TARGET) == 0 else -100.0


def _branched(siblings: bool):
    extra = ("allocator.inference.descend_first=true", "allocator.inference.branches=2",
             "allocator.inference.branch_margin=8.0", "allocator.inference.branch_tail_tokens=4",
             f"allocator.inference.branch_siblings={siblings}")
    return _session(False, budget=4, extra=extra)


@pytest.mark.parametrize("siblings", [False, True])
def test_sibling_branches_zoom_the_child_lensnets_zoom_passed_over(siblings):
    from mc.refocus import run_refocus  # noqa: PLC0415
    s = _branched(siblings)
    fits: list[float] = []
    scores = _coarse_first(child=0.3, sibling=0.5)  # the zoom descends into the sibling, passing TARGET's block over
    rec = run_refocus(s, scores, lambda: fits.append(_target_fit(s)) or fits[-1])
    lo = TARGET // K * K
    assert rec.passed_over[0] == (lo, lo + K)  # LensNet's zoom: the runner-up child under the opened LOD2 gist
    if siblings:  # branch 0 (LensNet's zoom), branch 1 (FAR, the 2nd gist), branch 2 (the passed-over child)
        assert len(rec.branch_fits) == 3 and rec.branch == 2 and _lod_at(s, TARGET) == 0
        assert (1, TARGET // K) in [e.entry for e in rec.edits if e.kind == "expand"]
    else:
        assert len(rec.branch_fits) == 2 and rec.branch == 0 and _lod_at(s, TARGET) == 1
    assert len(rec.edits) <= 4  # every path within the same edit budget
    s.wc.validate()


def test_no_sibling_branch_when_the_zoom_took_the_only_or_a_token_level_child():
    from mc.refocus import run_refocus  # noqa: PLC0415
    s = _branched(True)
    rec = run_refocus(s, _coarse_first(child=0.3), lambda: _target_fit(s))
    # the zoom took TARGET's own block (the best child): its runner-up is a sibling too, and zooming it changes nothing
    # about which layout is kept, since LensNet's own path already reads the record
    assert rec.branch == 0 and _lod_at(s, TARGET) == 0
    assert len(rec.branch_fits) == 2 + len(rec.passed_over)


@pytest.mark.parametrize("extra", [["allocator.inference.branches=1", "allocator.inference.branch_siblings=true"],
                                   ["allocator.inference.branches=3", "allocator.inference.descend_first=false",
                                    "allocator.inference.branch_siblings=true"],
                                   ["allocator.inference.branches=3", "allocator.inference.descend_first=true",
                                    "allocator.inference.branch_siblings=maybe"]])
def test_branch_siblings_needs_branches_and_descend_first(extra):
    with pytest.raises(ConfigError, match="branch_siblings"):
        load_config(OVERRIDES + ["allocator.inference.branch_tail_tokens=4", *extra])
