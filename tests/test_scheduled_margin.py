"""Scheduled margin (``allocator.inference.scheduled_margin``): in a refocus a session makes on its own schedule the
unchanged layout is kept unless a path fits the newest tokens better by the margin; a refocus called at a question
keeps the plain rule, or ``allocator.inference.prompt_margin`` when that is set. Tiny controller of
``tests/test_suffix_guard.py`` (K=4, full working context, a branched search whose fits are scripted), and who passes
``scheduled``: ``append``, ``generate`` and the session read."""
from __future__ import annotations

import pytest
import torch

from _tiny_config import SCENARIO, TINY
from mc import controller as controller_module
from mc import refocus as refocus_module
from mc.build import build_controller
from mc.config import ConfigError
from mc.config_loading import load_config
from mc.eval import session_read
from mc.session import RefocusRecord

BRANCHED = ["allocator.expand_top=1", "allocator.trade_margin_z=0.0", "allocator.inference.iterations=4",
            "allocator.inference.max_edits=2", "allocator.inference.edit_budget=6", "allocator.inference.branches=3",
            "allocator.inference.branch_unchanged=true", "allocator.inference.branch_tail_tokens=4",
            "allocator.inference.branch_margin=0"]
FAR = 20  # under an LOD2 gist: the zoom's first choice


def _controller(margin: float, prompt_margin: float = 0.0):
    torch.manual_seed(0)
    margins = [f"allocator.inference.scheduled_margin={margin}", f"allocator.inference.prompt_margin={prompt_margin}"]
    ctrl = build_controller(load_config(TINY + SCENARIO + BRANCHED + margins), device=torch.device("cpu"))
    ctrl.begin_session(torch.randint(0, 50, (200,), generator=torch.Generator().manual_seed(0)))
    ctrl.session_scores = lambda s: 0.5 * s.wc.overlap_mask(FAR, FAR + 1)
    return ctrl


def _fits(ctrl, monkeypatch, unchanged: float, zoom: float) -> None:
    """The unchanged layout's fit (asked first) and LensNet's zoom's (second); every other path fits far worse."""
    fits = iter([unchanged, zoom] + [-50.0] * 20)
    monkeypatch.setattr(ctrl, "_tail_fit", lambda: next(fits))


@pytest.mark.parametrize("margin, unchanged, zoom, scheduled, kept_zoom", [
    (0.0, -5.0, -4.5, True, True),  # off: the better fit wins, scheduled or not
    (1.0, -5.0, -4.5, False, True),  # at a question the margin does not apply
    (1.0, -5.0, -4.5, True, False),  # the zoom fits better by 0.5 < 1: the unchanged layout stays
    (1.0, -5.0, -3.5, True, True),  # by 1.5 > 1: the zoom is kept
    (1.0, -5.0, -4.0, True, True)])  # by exactly the margin: a tie keeps the zoom, as without it
def test_the_margin_decides_a_scheduled_refocus(monkeypatch, margin, unchanged, zoom, scheduled, kept_zoom):
    ctrl = _controller(margin)
    ctrl.session.refocus_log.append(RefocusRecord(num_tokens=200, iterations=0))  # not the session's first refocus
    before = list(ctrl.session.wc.entries)
    _fits(ctrl, monkeypatch, unchanged, zoom)
    rec = ctrl.refocus(scheduled=scheduled)
    assert bool(rec.edits) == kept_zoom and (ctrl.session.wc.entries != before) == kept_zoom
    assert rec.branch == (0 if kept_zoom else len(rec.branch_fits) - 1)
    ctrl.session.wc.validate()


@pytest.mark.parametrize("scheduled_margin, prompt_margin, zoom, scheduled, kept_zoom", [
    (0.0, 1.0, -4.5, False, False),  # at a prompt's end: the zoom fits better by 0.5 < 1, the unchanged layout stays
    (0.0, 1.0, -3.5, False, True),  # by 1.5 > 1: the zoom is kept
    (0.0, 1.0, -4.5, True, True),  # on schedule the prompt margin does not apply
    (2.0, 1.0, -3.5, True, False),  # there the scheduled margin does: 1.5 < 2
    (2.0, 1.0, -3.5, False, True)])  # and not at a prompt's end
def test_the_prompt_margin_decides_a_refocus_not_on_schedule(monkeypatch, scheduled_margin, prompt_margin, zoom,
                                                              scheduled, kept_zoom):
    """``allocator.inference.prompt_margin``: the unchanged layout's margin in every refocus not on the session's
    schedule (its first, a question's, a direct call), beside ``scheduled_margin`` for the others."""
    ctrl = _controller(scheduled_margin, prompt_margin)
    ctrl.session.refocus_log.append(RefocusRecord(num_tokens=200, iterations=0))  # so `scheduled` is passed through
    before = list(ctrl.session.wc.entries)
    _fits(ctrl, monkeypatch, -5.0, zoom)
    rec = ctrl.refocus(scheduled=scheduled)
    assert bool(rec.edits) == kept_zoom and (ctrl.session.wc.entries != before) == kept_zoom
    ctrl.session.wc.validate()


def test_a_sessions_first_refocus_takes_the_prompt_margin(monkeypatch):
    """A session's first refocus is its prompt's even when called as scheduled: the prompt margin decides it."""
    ctrl = _controller(0.0, 1.0)
    before = list(ctrl.session.wc.entries)
    _fits(ctrl, monkeypatch, -5.0, -4.5)
    assert not ctrl.refocus(scheduled=True).edits and ctrl.session.wc.entries == before


def _spy(monkeypatch) -> list[bool]:
    seen: list[bool] = []
    real = controller_module.run_refocus

    def spy(s, scores_fn, fit_fn, scheduled=False, relaid=False):
        seen.append(scheduled)
        return real(s, scores_fn, fit_fn, scheduled, relaid)
    monkeypatch.setattr(controller_module, "run_refocus", spy)
    return seen


def test_append_and_generate_refocus_on_schedule_and_a_call_does_not(monkeypatch):
    ctrl = _controller(1.0)
    seen = _spy(monkeypatch)
    ctrl.refocus()
    for tok in range(4):  # token by token (refocus_interval = 4 in the tiny config): a refocus on schedule
        ctrl.append(torch.tensor([tok]))
    ctrl.generate(4, use_cache=False)
    ctrl.append(torch.arange(4))  # a chunk of refocus_interval tokens or more is a prompt: its question's refocus
    assert seen[0] is False and len(seen) >= 4 and all(seen[1:-1]) and seen[-1] is False


@pytest.mark.parametrize("use_cache", [False, True])
def test_a_sessions_first_refocus_is_its_prompts(monkeypatch, use_cache):
    """A session never refocused: generate's first refocus (before the first token) is the question's, not
    scheduled; the ones after it are; the same through ``append``."""
    ctrl = _controller(1.0)
    seen = _spy(monkeypatch)
    ctrl.generate(9, use_cache=use_cache)
    assert len(seen) >= 2 and seen[0] is False and all(seen[1:])
    ctrl.begin_session(torch.arange(40) % 50)
    seen.clear()
    for tok in range(8):  # one at a time: refocuses after the 1st (40 prompt tokens unrefocused) and the 5th
        ctrl.append(torch.tensor([tok]))
    assert seen == [False, True]


@pytest.mark.parametrize("use_cache", [False, True])
def test_generate_reads_a_later_prompt_as_a_question(monkeypatch, use_cache):
    """A session that has refocused before gets a new prompt (appended without a refocus): generate's refocus before
    its first token is that prompt's question's, not scheduled; the ones in its loop are."""
    ctrl = _controller(1.0)
    ctrl.generate(9, use_cache=use_cache)  # refocuses: the prompt's, then on schedule
    seen = _spy(monkeypatch)
    ctrl.append(torch.arange(6) % 50, refocus=False)  # a second prompt, longer than refocus_interval = 4
    ctrl.generate(9, use_cache=use_cache)
    assert len(seen) >= 3 and seen[0] is False and all(seen[1:])


def test_the_session_read_refocuses_on_schedule(monkeypatch):
    ctrl = _controller(1.0)
    seen = _spy(monkeypatch)
    cfg = ctrl.cfg
    cfg.eval.session_tail = 12
    session_read.session_losses(ctrl, cfg, torch.randint(0, 50, (120,), generator=torch.Generator().manual_seed(1)),
                                "doc")
    assert seen and seen[0] is False and len(seen) > 1 and all(seen[1:])  # the prefix's end is not on schedule


@pytest.mark.parametrize("bad, match", [(["allocator.inference.scheduled_margin=-1"], "finite number"),
                                        (["allocator.inference.scheduled_margin=inf"], "finite number"),
                                        (["allocator.inference.scheduled_margin=true"], ""),  # OmegaConf's error
                                        (["allocator.inference.branch_unchanged=false",
                                          "allocator.inference.scheduled_margin=1"], "needs")])
def test_scheduled_margin_config_errors(bad, match):
    with pytest.raises(ConfigError, match=f"allocator.inference.scheduled_margin.*{match}"):
        load_config(TINY + SCENARIO + BRANCHED + bad)


@pytest.mark.parametrize("bad, match", [(["allocator.inference.prompt_margin=-0.5"], "finite number"),
                                        (["allocator.inference.prompt_margin=nan"], "finite number"),
                                        (["allocator.inference.branch_unchanged=false", "allocator.inference.prompt_margin=1"],
                                         "needs")])
def test_prompt_margin_config_errors(bad, match):
    with pytest.raises(ConfigError, match=f"allocator.inference.prompt_margin.*{match}"):
        load_config(TINY + SCENARIO + BRANCHED + bad)


def _guarded_controller(monkeypatch):
    """A later refocus's controller (cooldown 3) whose suffix guard is scripted to the first raw block; returns it and
    the LOD0 entries the guard's marks cover."""
    ctrl = _controller(1.0)
    ctrl.cfg.allocator.cooldown = 3
    ctrl.cfg.allocator.inference.suffix_guard = 2
    s = ctrl.session
    s.refocus_log.append(RefocusRecord(num_tokens=200, iterations=0))  # not the session's first refocus
    K = s.wc.block_size
    block = next(s.wc[i][1] // K for i in range(len(s.wc)) if s.wc[i][0] == 0)  # the first raw block
    monkeypatch.setattr(refocus_module, "suffix_guard_blocks", lambda sess, m: [block])
    return ctrl, {(0, block * K + j) for j in range(K)}


@pytest.mark.parametrize("scheduled, unchanged, zoom, marks_stay", [
    (True, -5.0, -4.5, False),  # on schedule, no edit kept: the refocus leaves no mark behind
    (True, -5.0, -3.5, True),  # on schedule, the zoom kept: its guard marks stay with it
    (False, -5.0, -6.0, True)])  # at a question, no edit kept: the guard keeps the named record raw through the answer
def test_a_scheduled_refocus_without_edits_leaves_no_marks(monkeypatch, scheduled, unchanged, zoom, marks_stay):
    """The suffix guard (here scripted to one raw block) marks its blocks before the paths are weighed; a scheduled
    refocus that keeps the unchanged layout drops those marks, so make_room is not steered by a refocus that changed
    nothing. The cooldown clock ticks either way."""
    ctrl, guarded = _guarded_controller(monkeypatch)
    s = ctrl.session
    marks, clock = dict(s.allocator._expanded_into), s.allocator.clock
    _fits(ctrl, monkeypatch, unchanged, zoom)
    rec = ctrl.refocus(scheduled=scheduled)
    assert bool(rec.edits) == (zoom > unchanged + (1.0 if scheduled else 0.0))
    assert ctrl.session.allocator.clock == clock + 1
    assert guarded <= set(ctrl.session.allocator._expanded_into) if marks_stay else \
        ctrl.session.allocator._expanded_into == marks


@pytest.mark.parametrize("scheduled", [True, False])
def test_the_check_of_a_scheduled_refocus_undoes_its_marks_too(monkeypatch, scheduled):
    """The refocus check's no-edit alternative is what the session would hold had the refocus kept no edit: for a
    scheduled one without the guard's marks (the rule above), for a question's with them."""
    ctrl, guarded = _guarded_controller(monkeypatch)
    ctrl.cfg.allocator.inference.refocus_check = 2
    _fits(ctrl, monkeypatch, -5.0, -3.5)  # the zoom wins by more than the margin: edits, so a check is pending
    assert ctrl.refocus(scheduled=scheduled).edits and ctrl.session.check is not None
    assert guarded <= set(ctrl.session.allocator._expanded_into)  # the kept zoom keeps them
    assert (guarded <= set(ctrl.session.check.allocator._expanded_into)) is not scheduled
