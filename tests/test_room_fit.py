"""The room fit (``allocator.inference.branch_room_fit = n``): each refocus candidate is fitted as it stands and
once room is made for n more tokens, the way their appends will make it; the candidate's fit is the mean. Tiny random nets on CPU (eager)."""
from __future__ import annotations

import pytest
import torch

from _tiny_config import SCENARIO, TINY
from mc.build import build_controller
from mc.config import ConfigError
from mc.config_loading import load_config
from mc.refocus import room_fit

# TINY: 4-token blocks, 32 entries, an 8-token recent tail, a refocus every 4 tokens; two levels over 600 tokens.
OVERRIDES = TINY + SCENARIO + ["mc.max_lod=2", "allocator.expand_top=1", "allocator.trade_margin_z=0.0",
                               "allocator.inference.iterations=4", "allocator.inference.max_edits=2",
                               "allocator.inference.edit_budget=6", "allocator.inference.branch_tail_tokens=3",
                               "allocator.inference.branch_margin=0", "allocator.inference.branches=3",
                               "allocator.inference.branch_unchanged=true"]


def _controller(*extra: str, room: int = 4):
    torch.manual_seed(0)
    return build_controller(load_config(OVERRIDES + [f"allocator.inference.branch_room_fit={room}", *extra]),
                            device=torch.device("cpu"))


def _prompt(seed: int, n: int = 600) -> torch.Tensor:
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed))


def _recording_fit(ctrl, values):
    """A stand-in for the base's tail fit: records the layout (entries, recent tail) each call reads."""
    seen, seq = [], iter(values)

    def fit():
        wc = ctrl.session.wc
        seen.append((list(wc.entries), wc.recent_tokens, len(wc)))
        return next(seq)
    return fit, seen


def test_make_room_can_stop_where_nothing_is_left_to_collapse():
    ctrl = _controller()
    ctrl.begin_session(_prompt(0))
    s = ctrl.session
    with pytest.raises(ValueError, match="make_room: cannot fit"):
        s.allocator.copy().make_room(s.wc.copy(), 10_000)
    wc = s.wc.copy()
    edits = s.allocator.copy().make_room(wc, 10_000, strict=False)
    wc.validate()
    assert edits and not wc.collapsible() and len(wc) < len(s.wc)


def test_the_room_fit_is_the_mean_of_the_layout_now_and_after_the_next_appends_room():
    ctrl = _controller()
    ctrl.begin_session(_prompt(1, 300))
    s = ctrl.session
    before, marks = list(s.wc.entries), s.allocator.copy()
    fit, seen = _recording_fit(ctrl, [-4.0, -10.0])
    assert room_fit(s, fit) == pytest.approx(-7.0)
    (now, now_recent, _), (later, later_recent, later_len) = seen
    assert now == before and now_recent == 8
    assert later_recent == 4  # branch_tail_tokens + 1: the entries the fit reads stay raw
    assert len(before) + 4 > 32 and later_len + 4 <= 32  # room for branch_room_fit (4) more tokens was made
    assert later[-4:] == before[-4:] and all(lod == 0 for lod, _ in later[-4:])
    # the session is as it was: layout, recent tail and cooldown state
    assert s.wc.entries == before and s.wc.recent_tokens == 8
    assert s.allocator._expanded_into == marks._expanded_into and s.allocator._collapsed_into == marks._collapsed_into


def test_the_room_fit_restores_the_session_when_the_fit_fails():
    ctrl = _controller()
    ctrl.begin_session(_prompt(2, 300))
    s = ctrl.session
    before, calls = list(s.wc.entries), []

    def failing():
        calls.append(len(s.wc))
        if len(calls) == 2:
            raise RuntimeError("base forward failed")
        return 0.0
    with pytest.raises(RuntimeError, match="base forward failed"):
        room_fit(s, failing)
    assert s.wc.entries == before and s.wc.recent_tokens == 8


def test_the_appends_room_collapses_around_the_blocks_a_refocus_opened():
    """After a zoom, its opened blocks cool down: the what-if layout collapses other groups first, as the
    appends' make_room will, so the cost of the zoom to the text before the tail shows in the fit."""
    ctrl = _controller("allocator.inference.branches=2", "allocator.inference.branch_unchanged=false")
    ctrl.begin_session(_prompt(3))
    s = ctrl.session
    ctrl.refocus()
    opened = [e.entry for e in s.refocus_log[-1].edits if e.kind == "expand"]
    assert opened
    K = s.wc.block_size
    children = {(lod - 1, idx * K + j) for lod, idx in opened for j in range(K)}
    fit, seen = _recording_fit(ctrl, [0.0, 0.0])
    room_fit(s, fit)
    later = set(seen[1][0])
    kept = children & set(s.wc.entries)  # the opened blocks' children still in the layout after the whole zoom
    assert kept and kept <= later  # none of them collapsed while other groups were left


def test_with_room_fit_every_candidate_is_fitted_twice(monkeypatch):
    ctrl = _controller()
    ctrl.begin_session(_prompt(5))
    start = list(ctrl.session.wc.entries)
    # unchanged (now, later), zoom 0, zoom 1, zoom 2: the unchanged layout's mean is -1, zoom 1's -0.5
    fit, seen = _recording_fit(ctrl, [0.0, -2.0, -3.0, -3.0, 0.0, -1.0, -9.0, -9.0])
    monkeypatch.setattr(ctrl, "_tail_fit", fit)
    rec = ctrl.refocus()
    assert len(seen) == 8 and seen[0][0] == start
    assert rec.branch_fits == [-3.0, -0.5, -9.0, -1.0] and rec.branch == 1
    assert ctrl.session.wc.entries == seen[4][0]  # the kept layout is the candidate as it stood, not its what-if
    ctrl.session.wc.validate()
    assert ctrl.session.wc.recent_tokens == 8


@pytest.mark.parametrize("extra, match", [
    (["allocator.inference.branches=1", "allocator.inference.branch_unchanged=false",
      "allocator.inference.branch_room_fit=4"], "needs allocator.inference.branches"),
    (["allocator.inference.branch_room_fit=-1"], "branch_room_fit"),
    (["allocator.inference.branch_room_fit=often"], "branch_room_fit")])
def test_branch_room_fit_needs_branches_and_tokens_at_least_zero(extra, match):
    with pytest.raises(ConfigError, match=match):
        load_config(OVERRIDES + extra)
