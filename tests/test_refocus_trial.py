"""The refocus trial (allocator.inference.refocus_trial): a scheduled refocus leaves the session's layout as it was and
the check takes its edits k tokens later only when those tokens fit them strictly better. A refocus called directly
is applied at once and checked as before. The decision, generate's cache, the session read, the report, config."""
from __future__ import annotations

import pytest
import torch

from mc.app.report import write_report
from mc.config_checks import ConfigError, validate
from mc.decode import DecodeStats
from mc.eval.evaluate import load_trained_controller, run_evaluation
from mc.eval.streamed import wc_session_loss
from mc import layout_fit
from tests.test_eval import fake_run, tiny_cfg
from tests.test_refocus_check import K, _by_hand, _ids, _scripted_fits


def _ctrl(tmp_path, every: int = 32, **eval_kw):
    cfg = tiny_cfg(**eval_kw)
    inf = cfg.allocator.inference
    inf.refocus_check, inf.refocus_interval, inf.refocus_trial = K, every, True
    cfg = validate(cfg)
    return cfg, load_trained_controller(cfg, fake_run(tmp_path, cfg), device=torch.device("cpu"))


@pytest.mark.parametrize("edited_fit, taken", [(1.0, True), (-1.0, False), (0.0, False)])
@torch.no_grad()
def test_trial_takes_the_edits_only_when_they_fit_better(tmp_path, monkeypatch, edited_fit, taken):
    """The session reads on without the scheduled refocus's edits; its check weighs the session's layout (first) against
    the refocus's with the same appends replayed (second) and takes that one only when strictly better (a tie keeps
    the session's). The record keeps the fits in the check's order, with the edits then without."""
    _, ctrl = _ctrl(tmp_path)
    ids = _ids(200, 3)
    s = ctrl.begin_session(ids[:150])
    before = s.wc.entries
    record = ctrl.refocus(scheduled=True)
    assert record.edits and record.trial and s.check is not None
    assert s.wc.entries == before  # nothing applied yet
    edited_now = s.check.wc.entries
    assert edited_now != before
    ctrl.append(ids[150:158], refocus=False)  # one chunk of K: due
    no_edit = s.wc.entries
    edited, _ = s.replay_layout(s.check.wc, s.check.allocator, s.check.chunks)
    assert edited.entries != no_edit
    monkeypatch.setattr(layout_fit, "tail_fit", lambda c, n, it=iter([0.0, edited_fit]): next(it))  # held, then edited
    assert ctrl.check_refocus() is (not taken)
    assert s.wc.entries == (edited.entries if taken else no_edit)
    assert record.check_fits == [edited_fit, 0.0] and record.reverted is (not taken)
    assert s.check is None


@torch.no_grad()
def test_a_direct_refocus_is_applied_at_once_and_checked(tmp_path, monkeypatch):
    """refocus() without ``scheduled`` (the one at a question's end) is not a trial: its edits apply now and the
    ordinary check may undo them; the appends' own refocuses (refocus on) are trials."""
    cfg, ctrl = _ctrl(tmp_path, every=16)
    ids = _ids(260, 4)
    s = ctrl.begin_session(ids[:150])
    before = s.wc.entries
    record = ctrl.refocus()
    assert record.edits and not record.trial and s.wc.entries != before
    monkeypatch.setattr(layout_fit, "tail_fit", lambda c, n, it=iter([0.0, 1.0]): next(it))  # kept 0, no edit 1
    ctrl.append(ids[150:158])  # the check is due: undone
    assert record.reverted and record.check_fits == [0.0, 1.0]
    snap = s.snapshot()
    ctrl.append(ids[158:166], refocus=False)
    no_refocus = s.wc.entries
    s.restore(snap)
    ctrl.append(ids[158:166])  # 16 tokens since the refocus: the append's scheduled refocus is a trial
    assert len(s.refocus_log) == 2 and s.refocus_log[-1].edits and s.refocus_log[-1].trial
    assert s.check is not None and s.check.record is s.refocus_log[-1]
    assert s.wc.entries == no_refocus != s.check.wc.entries  # the session did not take the proposed layout


@torch.no_grad()
def test_generate_with_trials_matches_the_cache_free_decode(tmp_path, monkeypatch):
    """The call's first refocus (its prompt's) is applied at once, the later ones are trials; taken and refused trials
    alike, the KV cache sees a taken trial as a new layout, so the cached decode draws the tokens the cache-free one
    does; a refused trial leaves the layout (and the cache) as it was."""
    _, ctrl = _ctrl(tmp_path, every=16)
    seen = _scripted_fits(monkeypatch, lambda j: j % 2 == 0)  # the second fit (the other layout) wins on even checks
    s = ctrl.begin_session(_ids(150, 27))  # a prompt whose own refocus edits
    snap = s.snapshot()
    stats = DecodeStats()
    cached = ctrl.generate(160, stats=stats)
    checked = [r for r in s.refocus_log if r.check_fits]
    log = s.refocus_log
    assert log[0].edits and not log[0].trial and all(r.trial == bool(r.edits) for r in log[1:]) and len(checked) >= 4
    assert [log["trial"] for log in stats.refocus_log] == [r.trial for r in s.refocus_log]
    # the session switches layouts on even checks: an applied refocus is then undone, a trial taken
    assert stats.checks == [r.reverted for r in checked] == [(j % 2 == 0) != r.trial for j, r in enumerate(checked)]
    assert True in stats.checks and False in stats.checks  # trials taken and refused
    assert any(seen[2 * j] != seen[2 * j + 1] for j in range(len(checked)))  # two layouts told apart
    s.restore(snap)
    ctrl.decoder.reset()
    seen.clear()
    plain_stats = DecodeStats()
    plain = ctrl.generate(160, use_cache=False, stats=plain_stats)
    assert torch.equal(cached, plain) and plain_stats.checks == stats.checks


@torch.no_grad()
def test_session_read_with_trials_equals_the_token_by_token_session(tmp_path, monkeypatch):
    _, ctrl = _ctrl(tmp_path, every=20)
    seen = _scripted_fits(monkeypatch, lambda j: j % 2 == 0)
    ids = _ids(240, 9)
    tail = ids[-90:]
    s = ctrl.begin_session(ids[:-90])
    ctrl.refocus()  # applied at once: the first check is an ordinary one, the later ones trials
    snap = s.snapshot()
    monkeypatch.setattr(ctrl, "refocus", lambda scheduled=True, f=ctrl.refocus: f(scheduled=scheduled))
    want, want_edits = _by_hand(ctrl, tail, 20)
    checked = [r for r in s.refocus_log if r.check_fits]
    assert [r.trial for r in checked] == [False] + [True] * (len(checked) - 1) and len(checked) >= 3
    assert all(seen[2 * j] != seen[2 * j + 1] for j in range(len(seen) // 2))
    s.restore(snap)
    seen.clear()
    got, edits = wc_session_loss(ctrl, tail, every=20, refocus=lambda: len(ctrl.refocus().edits))
    assert got == pytest.approx(want, abs=5e-6) and edits == want_edits


def test_evaluation_reports_the_trials(tmp_path):
    cfg, _ = _ctrl(tmp_path / "probe", n_docs=1, session_tail=80)
    out = run_evaluation(cfg, fake_run(tmp_path, cfg), progress=False, max_files=150)
    trials = taken = 0
    for row in out["per_doc"]:
        c = row["session_checks"]
        assert c["checked"] <= 1 and 0 <= c["taken"] <= c["trials"]  # only the first refocus is applied at once
        trials, taken = trials + c["trials"], taken + c["taken"]
    assert trials > 0
    write_report(cfg, tmp_path)
    report = (tmp_path / "report.md").read_text()
    assert f"the scheduled ones were trials, read {K} tokens without their edits" in report
    assert f"{taken} of {trials} taken" in report


@pytest.mark.parametrize("k, trial, match", [(0, True, r"needs allocator.inference.refocus_check > 0"),
                                             (K, 1, "expected true or false")])
def test_refocus_trial_is_checked_at_start_up(k, trial, match):
    cfg = tiny_cfg()
    cfg.allocator.inference.refocus_check, cfg.allocator.inference.refocus_trial = k, trial
    with pytest.raises(ConfigError, match=match):
        validate(cfg)
