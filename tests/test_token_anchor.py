"""Token anchor (``allocator.inference.token_anchor``): the raw token LensNet scores highest outside the recent tail,
above 0 and above every gist, is kept out of every trade of the refocus and (with ``edge_first``) opens the gists
bordering its block first. Hand-made scores on a tiny controller (K=4, two levels): after a 200-token prompt the
layout is LOD2 gists over [0, 176), the LOD1 gist (1, 44) over [176, 180), then tokens 180..199 raw, the last 8 the
recent tail; the working context is full, so every expansion is paid for by a trade."""
from __future__ import annotations

import pytest
import torch

from _tiny_config import K, SCENARIO, TINY
from mc.build import build_controller
from mc.config import ConfigError
from mc.config_loading import load_config
from mc.refocus import token_anchor

OVERRIDES = TINY + SCENARIO + ["allocator.expand_top=1", "allocator.trade_margin_z=0.0",
                               "allocator.inference.iterations=4", "allocator.inference.max_edits=2",
                               "allocator.inference.edit_budget=6"]
ANCHOR = 181  # raw, in the block [180, 184) that borders the gist (1, 44)
FAR = 20  # under the LOD2 gist (2, 1), the zoom's own first choice


def _controller(anchor: bool, edge_first: bool = False, extra: tuple[str, ...] = ()):
    torch.manual_seed(0)
    ctrl = build_controller(load_config(OVERRIDES + [f"allocator.inference.token_anchor={str(anchor).lower()}",
                                                     f"allocator.inference.edge_first={str(edge_first).lower()}", *extra]),
                            device=torch.device("cpu"))
    ctrl.begin_session(torch.randint(0, 256, (200,), generator=torch.Generator().manual_seed(0)))
    wc = ctrl.session.wc
    assert (1, 44) in wc.entries and (0, ANCHOR) in wc.entries and len(wc) == wc.max_entries
    return ctrl


def _scores(token_scores: dict[int, float], far: float = 0.5, rest: float = 0.0):
    """``token_scores[t]`` on the entry holding token t (raw ones), ``far`` on the entries over FAR, ``rest`` elsewhere."""
    def fn(s):
        wc = s.wc
        out = torch.full((len(wc),), rest) + (far - rest) * wc.overlap_mask(FAR, FAR + 1)
        for t, v in token_scores.items():
            i = wc.entries.index((0, t)) if (0, t) in wc.entries else None
            if i is not None:
                out[i] = v
        return out
    return fn


def _lod_at(s, token: int) -> int:
    return next(s.wc[i][0] for i in range(len(s.wc)) if s.wc.span(i)[0] <= token < s.wc.span(i)[1])


@pytest.mark.parametrize("token_scores, far, expected", [
    ({ANCHOR: 0.6}, 0.5, ANCHOR),  # above 0 and above every gist
    ({ANCHOR: 0.6, 195: 0.9}, 0.5, ANCHOR),  # 195 is in the recent tail (the question): never the anchor
    ({ANCHOR: 0.6}, 0.7, None),  # a gist scores higher: the zoom's own choice stands
    ({ANCHOR: -0.1}, -0.5, None),  # no token above 0
    ({ANCHOR: 0.6, 185: 0.8}, 0.5, 185)])  # the best raw token wins
def test_the_anchor_is_the_best_raw_token_before_the_tail(token_scores, far, expected):
    ctrl = _controller(True)
    s = ctrl.session
    got = token_anchor(s, _scores(token_scores, far)(s))
    assert (None if got is None else s.wc[got][1]) == expected


BRANCHED = ("allocator.inference.branches=3", "allocator.inference.branch_unchanged=true", "allocator.inference.branch_tail_tokens=4")


@pytest.mark.parametrize("extra, anchored", [
    ((), True),  # one path: LensNet's zoom alone
    ((*BRANCHED, "allocator.inference.branch_max_tokens=100"), True),  # past branch_max_tokens: the zoom vs no edit
    (BRANCHED, False)])  # a branched refocus: the anchor is not used
def test_no_trade_collapses_the_anchors_block(monkeypatch, extra, anchored):
    """The anchor's block is the cheapest group (its other tokens score -1): the plain refocus trades it away to
    pay for the zoom, the anchored one trades other groups and keeps it raw; a branched refocus is left as it is."""
    fn = _scores({ANCHOR: 0.6, 180: -1.0, 182: -1.0, 183: -1.0, **{t: -0.5 for t in range(184, 192)}})
    collapsed = []
    for anchor in (False, True):
        ctrl = _controller(anchor, extra=extra)
        if extra:  # the zoom must win the fit, so the kept layout is a zoom's
            fits = iter([-9.0] + [-1.0] + [-5.0] * 10)  # the unchanged layout first, then LensNet's zoom, then others
            monkeypatch.setattr(ctrl, "_tail_fit", lambda: next(fits))
        ctrl.session_scores = fn
        rec = ctrl.refocus()
        assert rec.edits and _lod_at(ctrl.session, FAR) < 2  # the zoom went on, paid by trades
        collapsed.append([e.entry for e in rec.edits if e.kind == "collapse"])
        ctrl.session.wc.validate()
        assert (_lod_at(ctrl.session, ANCHOR) == 0) == (anchor and anchored)
    assert (0, 180) in collapsed[0] and ((0, 180) not in collapsed[1]) == anchored


def test_with_edge_first_the_gist_bordering_the_anchor_opens_first():
    """A record half raw (the anchor) and half under the gist before it: the anchored zoom opens that gist first,
    the plain one goes to LensNet's best gist and never to the record's other half."""
    fn = _scores({ANCHOR: 0.6}, far=0.5)
    firsts, lods = [], []
    for anchor in (False, True):
        ctrl = _controller(anchor, edge_first=True)
        ctrl.session_scores = fn
        rec = ctrl.refocus()
        firsts.append(next(e.entry for e in rec.edits if e.kind == "expand"))
        lods.append(_lod_at(ctrl.session, 178))
        ctrl.session.wc.validate()
    assert firsts == [(2, 1), (1, 44)] and lods == [1, 0]


def test_off_or_without_an_anchor_nothing_changes():
    """No token above the gists: the anchored refocus makes the plain one's edits, with one LensNet call per
    iteration either way (the anchor's scoring of the start is the first iteration's)."""
    fn = _scores({ANCHOR: -0.2}, far=0.5)
    edits, calls = [], []
    for anchor in (False, True):
        ctrl = _controller(anchor, edge_first=True)
        n = [0]

        def counted(s, n=n):
            n[0] += 1
            return fn(s)
        ctrl.session_scores = counted
        rec = ctrl.refocus()
        edits.append([(e.kind, e.entry) for e in rec.edits])
        calls.append((n[0], rec.iterations))
    assert edits[0] == edits[1] and edits[0]
    assert calls[0][0] == calls[0][1] and calls[1][0] == calls[1][1]  # one scoring per iteration either way


def test_token_anchor_must_be_a_boolean():
    with pytest.raises(ConfigError, match="allocator.inference.token_anchor"):
        load_config(OVERRIDES + ["allocator.inference.token_anchor=maybe"])
