"""Anchor path (``allocator.inference.anchor_path``): where a token anchor stands and the zoom goes on past the gists
bordering it, the layout as it stood then is a candidate beside the whole zoom and the unchanged layout, kept by the
same fit. The scenario of ``tests/test_token_anchor.py``: the anchor's block borders the gist (1, 44), which the
anchored zoom opens first; LensNet's own best gist (over FAR) comes after it."""
from __future__ import annotations

import pytest
import torch

from mc.config import ConfigError
from mc.config_loading import load_config
from test_token_anchor import ANCHOR, BRANCHED, FAR, OVERRIDES, _controller, _lod_at, _scores

PAST_BRANCHES = (*BRANCHED, "allocator.inference.branch_max_tokens=100")  # a 200-token session: the zoom vs no edit


def _refocus(monkeypatch, fits: list[float], *, anchor_path: bool = True, anchor_score: float = 0.6):
    """One refocus with the tail fits given in call order (the unchanged layout, the zoom, then the anchor path)."""
    ctrl = _controller(True, edge_first=True, extra=(*PAST_BRANCHES, f"allocator.inference.anchor_path={str(anchor_path).lower()}"))
    calls = iter(fits)
    monkeypatch.setattr(ctrl, "_tail_fit", lambda: next(calls))
    ctrl.session_scores = _scores({ANCHOR: anchor_score}, far=0.5)
    rec = ctrl.refocus()
    ctrl.session.wc.validate()
    return ctrl, rec


def test_the_layout_at_the_anchors_edges_is_kept_when_it_fits_best(monkeypatch):
    ctrl, rec = _refocus(monkeypatch, [-19.0, -15.0, -1.0])  # better than the zoom by more than branch_margin (8)
    s = ctrl.session
    assert rec.branch == 1 and rec.branch_fits == [-15.0, -1.0, -19.0]  # the zoom, the anchor path, the unchanged one
    expanded = [e.entry for e in rec.edits if e.kind == "expand"]
    assert expanded == [(1, 44)]  # the edge, nothing of LensNet's own ranking after it
    assert _lod_at(s, 178) == 0 and _lod_at(s, FAR) == 2 and _lod_at(s, ANCHOR) == 0


def test_the_whole_zoom_stays_when_it_fits_better(monkeypatch):
    ctrl, rec = _refocus(monkeypatch, [-9.0, -1.0, -5.0])
    assert rec.branch == 0 and rec.branch_fits == [-1.0, -5.0, -9.0]
    assert [e.entry for e in rec.edits if e.kind == "expand"][0] == (1, 44) and _lod_at(ctrl.session, FAR) < 2


def test_the_whole_zoom_stays_unless_beaten_by_the_margin(monkeypatch):
    _, rec = _refocus(monkeypatch, [-19.0, -9.0, -1.0])  # better by exactly branch_margin: not enough
    assert rec.branch == 0


def test_off_or_without_an_anchor_there_is_no_third_candidate(monkeypatch):
    _, off = _refocus(monkeypatch, [-9.0, -5.0], anchor_path=False)
    _, no_anchor = _refocus(monkeypatch, [-9.0, -5.0], anchor_score=-0.2)  # no raw token above the gists
    assert len(off.branch_fits) == 2 and len(no_anchor.branch_fits) == 2


@pytest.mark.parametrize("extra", [["allocator.inference.anchor_path=true"],  # no token anchor
                                   ["allocator.inference.anchor_path=true", "allocator.inference.token_anchor=true"],
                                   ["allocator.inference.anchor_path=yes"]])
def test_anchor_path_needs_the_anchor_and_the_unchanged_candidate(extra):
    with pytest.raises(ConfigError, match="allocator.inference.anchor_path"):
        load_config(OVERRIDES + extra)


def test_the_tiny_scenario_is_what_the_tests_assume():
    """The anchored zoom, left alone, goes on past the edge to LensNet's own best gist (what the candidate cuts)."""
    ctrl = _controller(True, edge_first=True)
    ctrl.session_scores = _scores({ANCHOR: 0.6}, far=0.5)
    rec = ctrl.refocus()
    expanded = [e.entry for e in rec.edits if e.kind == "expand"]
    assert expanded[0] == (1, 44) and len(expanded) > 1 and torch.is_tensor(ctrl.session.history())
