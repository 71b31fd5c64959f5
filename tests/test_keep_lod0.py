"""Keep LOD0 (``allocator.inference.keep_lod0``): a refocus pays for its expansions by trading gist groups first,
and a block that was at LOD0 when it began only when no gist group can pay; appends are unaffected."""
from __future__ import annotations

import torch

from _tiny_config import K, SCENARIO, TINY
from mc.build import build_controller
from mc.config_loading import load_config
from mc.refocus import run_refocus, zoom

OVERRIDES = TINY + SCENARIO + ["allocator.expand_top=1", "allocator.trade_margin_z=0.0",
                               "allocator.inference.iterations=4", "allocator.inference.max_edits=2",
                               "allocator.inference.edit_budget=6"]
TARGET = 101  # far from the recent tail, under an LOD2 gist of the filled layout
FAR = 20  # under another LOD2 gist


def _session(keep: bool):
    """A session whose layout holds both kinds of tradeable group: LOD0 blocks before the recent tail, and one
    whole LOD1 sibling group (a plain 2-edit zoom expanded the LOD2 gist over TARGET first)."""
    ctrl = build_controller(load_config(OVERRIDES + [f"allocator.inference.keep_lod0={keep}", "allocator.cooldown=0"]),
                            device=torch.device("cpu"))
    ctrl.begin_session(torch.randint(0, 256, (200,), generator=torch.Generator().manual_seed(0)))
    s = ctrl.session
    inf = s.cfg.allocator.inference
    inf.edit_budget = 2
    zoom(s, lambda sess: sess.wc.overlap_mask(TARGET, TARGET + 1))
    inf.edit_budget = 6
    assert [lod for lod, _ in s.wc.entries].count(1) >= K  # the LOD1 children of the opened gist
    return ctrl


def _scores(s):
    """1 over FAR, -1 on every LOD0 entry (the cheapest groups to trade), 0 elsewhere."""
    wc = s.wc
    lod0 = torch.tensor([float(lod == 0) for lod, _ in wc.entries])
    return wc.overlap_mask(FAR, FAR + 1) - lod0


def _lod0(s) -> set:
    return {e for e in s.wc.entries if e[0] == 0}


def test_a_refocus_trades_gist_groups_before_what_was_at_lod0():
    plain, kept = _session(False), _session(True)
    start = _lod0(plain.session)
    assert start == _lod0(kept.session)
    rec = run_refocus(plain.session, _scores, lambda: 0.0)
    assert any(e.kind == "collapse" and e.entry[0] == 0 for e in rec.edits), rec.edits  # else this tests nothing
    rec = run_refocus(kept.session, _scores, lambda: 0.0)
    collapses = [e for e in rec.edits if e.kind == "collapse"]
    assert collapses and collapses[0].entry[0] == 1, rec.edits  # the LOD1 group paid first
    assert any(e.kind == "expand" for e in rec.edits)
    assert kept.session.allocator.keep == frozenset()  # only while the refocus runs


def test_with_no_gist_group_a_kept_block_still_pays():
    """keep_lod0 orders the trades, it does not forbid them: a layout whose only tradeable groups are LOD0
    blocks still zooms."""
    ctrl = build_controller(load_config(OVERRIDES + ["allocator.inference.keep_lod0=true"]), device=torch.device("cpu"))
    ctrl.begin_session(torch.randint(0, 256, (200,), generator=torch.Generator().manual_seed(0)))
    rec = run_refocus(ctrl.session, lambda s: s.wc.overlap_mask(TARGET, TARGET + 1), lambda: 0.0)
    assert any(e.kind == "expand" for e in rec.edits) and any(e.kind == "collapse" for e in rec.edits)


def test_appends_after_the_refocus_are_unaffected():
    ctrl = _session(True)
    run_refocus(ctrl.session, _scores, lambda: 0.0)
    ctrl.append(torch.randint(0, 256, (64,), generator=torch.Generator().manual_seed(1)))
    s = ctrl.session
    assert len(s.wc) <= s.wc.max_entries and s.allocator.keep == frozenset()
