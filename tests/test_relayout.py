"""A question's refocus after a prompt starts from a new session's layout (``InferenceSession.relayout_after_prompt``).

Tiny controller (K=4, 32 entries, refocus every 4 tokens) with LensNet's scores scripted as "the entries over one
token": the session's first refocus opens the blocks over one token, a prompt is appended, and the question's refocus
looks for another. Without the relayout the first zoom stays raw and under cooldown through the prompt's appends, so
the question's refocus starts from a layout no new session would hold (on `long_corpus` nets it then answered a
second question with the first one's value: obsidian Inference, "A later question")."""
from __future__ import annotations

import torch

from _tiny_config import SCENARIO, TINY
from mc import controller as controller_module
from mc.build import build_controller
from mc.config_loading import load_config
from mc.decode import DecodeStats
from mc.session import InferenceSession

FIRST, SECOND = 20, 230  # the token the first refocus looks for; the one the question's looks for (in the prompt)


def _controller(*extra: str):
    torch.manual_seed(0)
    ctrl = build_controller(load_config(TINY + SCENARIO + ["allocator.expand_top=1", "allocator.inference.iterations=4",
                                                          *extra]), device=torch.device("cpu"))
    ctrl.target = FIRST
    ctrl.session_scores = lambda s: 0.5 * s.wc.overlap_mask(ctrl.target, ctrl.target + 1)
    return ctrl


def _tokens(n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 50, (n,), generator=torch.Generator().manual_seed(seed))


def _session_with_a_zoom(ctrl):
    """A 200-token session whose first refocus opened the blocks over FIRST, then a 60-token prompt (no refocus)."""
    s = ctrl.begin_session(_tokens(200, 1))
    assert ctrl.refocus().edits, "the scripted first refocus must open something"
    ctrl.append(_tokens(60, 2), refocus=False)
    ctrl.target = SECOND
    return s


def test_a_later_question_is_read_as_a_new_session_would_read_it():
    ctrl = _controller()
    s = _session_with_a_zoom(ctrl)
    record = ctrl.refocus()
    assert record.relaid and record.edits
    continued = s.wc.entries
    fresh = ctrl.begin_session(s.history())
    first = ctrl.refocus()
    assert not first.relaid  # a session's first refocus has nothing to relay
    assert record.edits == first.edits and continued == fresh.wc.entries


def test_without_the_relayout_the_old_zoom_stays(monkeypatch):
    """The failure the relayout fixes, reproduced: the first zoom's blocks are still raw when the question comes."""
    ctrl = _controller()
    s = _session_with_a_zoom(ctrl)
    assert (0, FIRST) in s.wc.entries, s.wc.entries  # still raw after the 60-token prompt
    monkeypatch.setattr(InferenceSession, "relayout_after_prompt", lambda self: False)
    record = ctrl.refocus()
    fresh = ctrl.begin_session(s.history())
    assert (record.edits, s.wc.entries) != (ctrl.refocus().edits, fresh.wc.entries)


def test_when_there_is_no_relayout():
    ctrl = _controller()
    s = _session_with_a_zoom(ctrl)
    assert not ctrl.refocus(scheduled=True).relaid  # the session's own schedule keeps its layout
    ctrl.append(_tokens(60, 3), refocus=False)
    assert ctrl.refocus().relaid
    assert not ctrl.refocus().relaid  # no tokens since: a second refocus goes on from the first (deeper)
    ctrl.append(_tokens(3, 4), refocus=False)  # fewer than refocus_interval = 4 tokens: not a prompt
    assert not ctrl.refocus().relaid
    assert [r.relaid for r in s.refocus_log] == [False, False, True, False, False]


def test_relayout_clears_marks_and_drops_a_pending_check(monkeypatch):
    ctrl = _controller("allocator.inference.refocus_check=2")
    s = _session_with_a_zoom(ctrl)
    assert s.check is not None and s.allocator.clock == 1  # the first refocus waits for its check
    forced = []
    monkeypatch.setattr(controller_module, "check_refocus", lambda *a, **k: forced.append(k) or False)
    assert s.relayout_after_prompt()
    assert s.check is None and s.allocator.clock == 0
    assert not any(s.allocator.collapse_blocked(s.wc, i) for i in s.wc.collapsible())
    ctrl.refocus()
    assert forced == []  # nothing left to check: the refocus it judged no longer shapes the layout


def test_generate_relays_a_later_prompt_and_only_that():
    """The refocus before the first token is relaid, the loop's are not; the KV cache follows the new layout (the
    same tokens as the cache-free decode)."""
    said = {}
    for use_cache in (False, True):
        ctrl = _controller()
        _session_with_a_zoom(ctrl)
        stats = DecodeStats()
        said[use_cache] = ctrl.generate(9, use_cache=use_cache, stats=stats).tolist()
        assert [r["relaid"] for r in stats.refocus_log] == [True, False, False]
    assert said[True] == said[False]


def test_append_reads_a_chunk_as_a_prompt_and_tokens_on_schedule(monkeypatch):
    ctrl = _controller()
    s = _session_with_a_zoom(ctrl)
    ctrl.refocus()
    seen = []
    real = controller_module.run_refocus

    def spy(s, scores_fn, fit_fn, scheduled=False, relaid=False):
        seen.append((scheduled, relaid))
        return real(s, scores_fn, fit_fn, scheduled, relaid)
    monkeypatch.setattr(controller_module, "run_refocus", spy)
    for tok in range(4):  # token by token: one refocus after the 4th, on schedule
        ctrl.append(torch.tensor([tok]))
    ctrl.append(_tokens(40, 5))  # a chunk of refocus_interval tokens or more: a prompt, its question's refocus
    assert seen == [(True, False), (False, True)]
    assert s.refocus_log[-1].relaid
