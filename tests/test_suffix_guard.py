"""Suffix guard (``allocator.inference.suffix_guard``): the raw blocks at and after the latest earlier occurrence of
the session's newest text are kept out of every trade of a refocus. Tiny controller (K=4, two levels, the scenario of
``tests/test_token_anchor.py``): after a 200-token prompt tokens 180..199 are raw, the last 8 the recent tail, and the
working context is full, so every expansion is paid for by a trade."""
from __future__ import annotations

import pytest
import torch

from _tiny_config import SCENARIO, TINY
from mc.build import build_controller
from mc.config import ConfigError
from mc.config_loading import load_config
from mc.refocus import suffix_guard_blocks

OVERRIDES = TINY + SCENARIO + ["allocator.expand_top=1", "allocator.trade_margin_z=0.0",
                               "allocator.inference.iterations=4", "allocator.inference.max_edits=2",
                               "allocator.inference.edit_budget=6"]
KEY = [250, 251, 252]  # ids the filler (0..49) never draws
FAR = 20  # under an LOD2 gist: the zoom's own first choice


def _controller(guard: int, record_at: int | None = 180, extra: tuple[str, ...] = ()):
    """A session whose prompt ends with KEY; ``record_at``: where KEY occurs before (None: nowhere)."""
    torch.manual_seed(0)
    ctrl = build_controller(load_config(OVERRIDES + [f"allocator.inference.suffix_guard={guard}", *extra]),
                            device=torch.device("cpu"))
    ids = torch.randint(0, 50, (200,), generator=torch.Generator().manual_seed(0))
    if record_at is not None:
        ids[record_at:record_at + len(KEY)] = torch.tensor(KEY)
    ids[200 - len(KEY):] = torch.tensor(KEY)
    ctrl.begin_session(ids)
    wc = ctrl.session.wc
    assert (1, 44) in wc.entries and all((0, t) in wc.entries for t in range(180, 200)) and len(wc) == wc.max_entries
    return ctrl


def _scores(s):
    """The entries over FAR score 0.5, the raw tokens after the prompt's record -1 (the cheapest groups), the rest 0."""
    wc = s.wc
    out = 0.5 * wc.overlap_mask(FAR, FAR + 1)
    for i in range(len(wc)):
        if wc[i][0] == 0 and 180 <= wc[i][1] < 192:
            out[i] = -1.0
    return out


def _lod_at(s, token: int) -> int:
    return next(s.wc[i][0] for i in range(len(s.wc)) if s.wc.span(i)[0] <= token < s.wc.span(i)[1])


@pytest.mark.parametrize("guard, record_at, expected", [
    (3, 180, [45, 46]),  # the match [180, 183), then 3 tokens after it: blocks [180, 188)
    (2, 180, [45, 46]),
    (2, 186, [46, 47]),  # [186, 189) and 3 more: blocks [184, 192)
    (4, 180, []),  # the longest match is 3 tokens: shorter than asked
    (3, None, []),  # the key occurs nowhere before
    (3, 2, [])])  # the match lies under a gist: a guard, not a locator, leaves it to LensNet
def test_the_guarded_blocks_are_the_raw_ones_at_and_after_the_match(guard, record_at, expected):
    s = _controller(guard, record_at).session
    assert suffix_guard_blocks(s, guard) == expected


def test_the_latest_occurrence_is_guarded():
    """Two earlier records of the key, matched equally long: the newer one (raw) is guarded, not the older one."""
    ctrl = _controller(3)
    ids = ctrl.session.history().clone()
    ids[100:103] = torch.tensor(KEY)
    ids[99] = (ids[196] + 1) % 50  # a match no longer than the newer one's, so only its age tells them apart
    ctrl.begin_session(ids)
    assert suffix_guard_blocks(ctrl.session, 3) == [45, 46]


BRANCHED = ("allocator.inference.branches=3", "allocator.inference.branch_unchanged=true",
            "allocator.inference.branch_tail_tokens=4")


@pytest.mark.parametrize("extra", [(), BRANCHED])
def test_no_trade_collapses_the_guarded_record(monkeypatch, extra):
    """The record's raw blocks are among the cheapest groups: without the guard the zoom trades them away, with it it trades
    other groups and the record stays raw, on LensNet's zoom alone and on a branched refocus's kept path."""
    lods, collapsed = [], []
    for guard in (0, 3):
        ctrl = _controller(guard, extra=extra)
        if extra:  # LensNet's zoom wins the fit, so the kept layout is a zoom's
            fits = iter([-9.0] + [-1.0] + [-5.0] * 10)
            monkeypatch.setattr(ctrl, "_tail_fit", lambda: next(fits))
        ctrl.session_scores = _scores
        rec = ctrl.refocus()
        assert rec.edits and _lod_at(ctrl.session, FAR) < 2  # the zoom went on, paid by trades
        ctrl.session.wc.validate()
        lods.append([_lod_at(ctrl.session, t) for t in range(180, 188)])
        collapsed.append([e.entry for e in rec.edits if e.kind == "collapse"])
    assert any(lod > 0 for lod in lods[0]) and lods[1] == [0] * 8
    assert (0, 180) in collapsed[0] and not any(e in collapsed[1] for e in [(0, 180), (0, 184)])


def test_without_a_match_the_refocus_is_unchanged():
    edits = []
    for guard in (0, 3):
        ctrl = _controller(guard, record_at=None)
        ctrl.session_scores = _scores
        edits.append([(e.kind, e.entry) for e in ctrl.refocus().edits])
    assert edits[0] == edits[1] and edits[0]


@pytest.mark.parametrize("bad", ["-1", "1.5", "true"])
def test_suffix_guard_must_be_a_count(bad):
    with pytest.raises(ConfigError, match="allocator.inference.suffix_guard"):
        load_config(OVERRIDES + [f"allocator.inference.suffix_guard={bad}"])
