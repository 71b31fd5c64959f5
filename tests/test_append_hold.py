"""The append hold (``allocator.inference.append_hold = h``): the appends after a refocus make room around its
opened blocks (the cooldown) for h tokens, then in plain age order, the refocus's blocks included. Tiny random
nets on CPU (eager)."""
from __future__ import annotations

import pytest
import torch

from _tiny_config import SCENARIO, TINY
from mc.build import build_controller
from mc.config import ConfigError
from mc.config_loading import load_config

# TINY: 4-token blocks, 32 entries, an 8-token recent tail; two levels over 300 tokens; one zoom per refocus.
OVERRIDES = TINY + SCENARIO + ["mc.max_lod=2", "allocator.expand_top=1", "allocator.trade_margin_z=0.0",
                               "allocator.inference.iterations=4", "allocator.inference.max_edits=2",
                               "allocator.inference.edit_budget=6", "allocator.inference.refocus_interval=1000"]


def _controller(hold: int):
    torch.manual_seed(0)
    return build_controller(load_config(OVERRIDES + [f"allocator.inference.append_hold={hold}"]),
                            device=torch.device("cpu"))


def _tokens(seed: int, n: int) -> torch.Tensor:
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed))


def _opened(ctrl) -> set:
    """The children the last refocus's expansions made (the nodes its cooldown protects)."""
    K = ctrl.session.wc.block_size
    return {(lod - 1, idx * K + j) for e in ctrl.session.refocus_log[-1].edits if e.kind == "expand"
            for lod, idx in [e.entry] for j in range(K)}


@pytest.mark.parametrize("hold, since, n, parts", [
    (0, 0, 32, [(32, True)]), (8, 0, 32, [(8, True), (24, False)]), (8, 0, 8, [(8, True)]),
    (8, 5, 1, [(1, True)]), (8, 8, 1, [(1, False)]), (8, 6, 5, [(2, True), (3, False)]), (8, 20, 4, [(4, False)])])
def test_an_append_is_split_where_the_hold_ends(hold, since, n, parts):
    ctrl = _controller(hold)
    ctrl.begin_session(_tokens(0, 300))
    ctrl.session.tokens_since_refocus = since
    assert ctrl.session._append_parts(n) == parts


def _stream(hold: int, n_after: int):
    """100 tokens, one refocus, then ``n_after`` tokens one at a time; returns how many of the children the refocus
    opened are in the layout right after it and after each append."""
    ctrl = _controller(hold)
    ctrl.begin_session(_tokens(1, 100))
    ctrl.refocus()
    opened = _opened(ctrl)
    kept = [len(opened & set(ctrl.session.wc.entries))]
    for tok in _tokens(2, n_after):
        ctrl.append(tok.view(1), refocus=False)
        ctrl.session.wc.validate()
        kept.append(len(opened & set(ctrl.session.wc.entries)))
    return kept


def test_past_the_hold_the_appends_take_back_the_refocus_blocks_before_newer_text():
    cool, held = _stream(0, 12), _stream(3, 12)
    assert cool[0] == held[0] > 0
    assert cool == [cool[0]] * 13  # the cooldown alone: the opened blocks stay for the whole interval
    assert held[:4] == cool[:4]  # within the hold (3 tokens) the appends make room as before
    assert held[-1] < cool[0]  # past it the refocus's blocks, the oldest groups, go first


def test_a_chunk_across_the_hold_is_made_room_for_as_its_two_parts():
    a, b = _controller(8), _controller(8)
    for c in (a, b):
        c.begin_session(_tokens(3, 300))
        c.refocus()
    more = _tokens(4, 24)
    a.append(more, refocus=False)
    b.append(more[:8], refocus=False)
    b.append(more[8:], refocus=False)
    assert a.session.wc.entries == b.session.wc.entries
    assert a.session.tokens_since_refocus == b.session.tokens_since_refocus == 24


def test_make_room_out_of_cooldown_order_takes_the_oldest_group():
    ctrl = _controller(0)
    ctrl.begin_session(_tokens(1, 100))
    ctrl.refocus()
    s = ctrl.session
    cooled, plain = s.wc.copy(), s.wc.copy()
    need = s.wc.max_entries - len(s.wc) + 1  # room for one token more than is free: at least one collapse
    first_cooled = s.allocator.copy().make_room(cooled, need)[0]
    first_plain = s.allocator.copy().make_room(plain, need, cooling_last=False)[0]
    assert first_plain.index == min(s.wc.collapsible())  # the oldest collapsible group, cooling or not
    assert s.allocator.collapse_blocked(s.wc, first_plain.index)  # here that is a block the refocus opened,
    assert first_cooled.index > first_plain.index  # which the cooldown order leaves for a newer group


def test_append_hold_is_tokens_at_least_zero():
    with pytest.raises(ConfigError, match="allocator.inference.append_hold"):
        load_config(OVERRIDES + ["allocator.inference.append_hold=-1"])


def test_the_lookahead_reads_its_continuation_as_the_tokens_right_after_the_refocus(monkeypatch):
    """Inside a refocus the session's count of tokens since the last refocus is the whole history; the lookahead's
    appends must still make room as the answer's will, within the hold: the same fits and layout as with no hold."""
    extra = ["allocator.inference.branches=3", "allocator.inference.branch_lookahead=6",
             "allocator.inference.branch_tail_tokens=3", "allocator.inference.branch_margin=0"]
    records = []
    for hold in (0, 8):
        torch.manual_seed(0)
        ctrl = build_controller(load_config(OVERRIDES + extra + [f"allocator.inference.append_hold={hold}"]),
                                device=torch.device("cpu"))
        ctrl.begin_session(_tokens(1, 100))
        assert ctrl.session.tokens_since_refocus == 100
        rec = ctrl.refocus()
        records.append((rec.branch_fits, rec.branch, list(ctrl.session.wc.entries)))
    assert records[0] == records[1]
