"""The fallback (allocator.inference.refocus_fallback): every k tokens the session's layout is weighed against the one
it would hold had it never refocused, and replaced by it when that fits those tokens strictly better. The
never-refocused layout, the decision, generate's cache, the session read, the report, config."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from mc.app.report import write_report
from mc.config_checks import ConfigError, validate
from mc.decode import DecodeStats
from mc.eval.evaluate import load_trained_controller, run_evaluation
from mc.eval.streamed import wc_session_loss
from mc import layout_fit
from mc.layout_fit import check_fallback
from tests.test_eval import fake_run, tiny_cfg
from tests.test_refocus_check import K, _allocator_state, _ids


def _ctrl(tmp_path, every: int = 32, **eval_kw):
    cfg = tiny_cfg(**eval_kw)
    inf = cfg.allocator.inference
    inf.refocus_check, inf.refocus_interval, inf.refocus_fallback = K, every, True
    cfg = validate(cfg)
    return cfg, load_trained_controller(cfg, fake_run(tmp_path, cfg), device=torch.device("cpu"))


@torch.no_grad()
def test_unfocused_layout_is_the_never_refocused_session(tmp_path):
    """Replayed, the session's never-refocused layout is what a session over the same tokens that never refocused
    holds: after refocuses with edits, across chunks and the level the history grows into."""
    _, ctrl = _ctrl(tmp_path)
    ids = _ids(20 + 766, 1)
    chunks = [3, 40, 1, 300, 1, 1, 400]
    s = ctrl.begin_session(ids[:20])
    at = 20
    for n in chunks:
        ctrl.append(ids[at: at + n], refocus=False)
        at += n
        ctrl.refocus()
    assert sum(len(r.edits) for r in s.refocus_log) > 0
    u = s.unfocused
    wc, al = s.replay_layout(u.wc, u.allocator, u.chunks)
    plain = ctrl.begin_session(ids[:20])
    at = 20
    for n in chunks:
        ctrl.append(ids[at: at + n], refocus=False)
        at += n
    assert wc.entries == plain.wc.entries and _allocator_state(al) == _allocator_state(plain.allocator)


@pytest.mark.parametrize("unfocused_fit, fell_back", [(1.0, True), (-1.0, False), (0.0, False)])
@torch.no_grad()
def test_fallback_decides_by_the_fits(tmp_path, monkeypatch, unfocused_fit, fell_back):
    """Strictly better under the never-refocused layout: the session takes it (and drops a pending refocus check);
    worse or a tie: the session keeps its own. Each weighing is logged with both fits."""
    _, ctrl = _ctrl(tmp_path)
    ids = _ids(200, 3)
    s = ctrl.begin_session(ids[:150])
    snap0 = s.snapshot()
    assert ctrl.refocus().edits
    ctrl.append(ids[150:155], refocus=False)
    refocused = s.wc.entries
    s.restore(snap0)
    ctrl.append(ids[150:155], refocus=False)
    never = s.wc.entries  # the same appends, no refocus
    assert never != refocused
    s.restore(snap0)
    ctrl.refocus()
    ctrl.append(ids[150:155], refocus=False)
    assert not s.fallback_due() and check_fallback(ctrl) is None  # 5 of K tokens: not due
    ctrl.append(ids[155:158], refocus=False)
    assert s.fallback_due() and s.check is not None
    monkeypatch.setattr(layout_fit, "tail_fit", lambda c, n, it=iter([0.0, unfocused_fit]): next(it))  # held, never
    assert check_fallback(ctrl) is fell_back
    held = s.wc.entries
    assert s.fallback_log == [{"num_tokens": 158, "fits": [0.0, unfocused_fit], "fell_back": fell_back}]
    assert (s.check is None) is fell_back  # a pending refocus check goes with the layout it judged
    assert s.unfocused.tokens == 0 and not s.fallback_due()
    snap = s.snapshot()
    s.restore(snap0)
    ctrl.append(ids[150:158], refocus=False)
    assert (held == s.wc.entries) is fell_back  # fallen back: the never-refocused session's layout
    s.restore(snap)


@torch.no_grad()
def test_no_weighing_while_the_layout_is_the_never_refocused_one(tmp_path, monkeypatch):
    _, ctrl = _ctrl(tmp_path)
    ids = _ids(200, 3)
    s = ctrl.begin_session(ids[:150])
    monkeypatch.setattr(layout_fit, "tail_fit", lambda *a, **k: pytest.fail("no fit is needed"))
    ctrl.append(ids[150:150 + K], refocus=False)
    assert s.fallback_due() and check_fallback(ctrl) is None and not s.fallback_due() and s.fallback_log == []


def _scripted(monkeypatch, fall_back_if):
    """Each fit: 0 for the layout a judgement starts on, then for a refocus check -1 (the refocus stays) and for the
    j-th fallback +1 when ``fall_back_if(j)`` else -1. Returns the fallbacks' two layouts, in order."""
    seen, calls = [], []

    def fit(ctrl, n=0):
        assert n == K
        calls.append(ctrl.session.wc.entries)
        if len(calls) % 2:
            return 0.0
        in_fallback = ctrl.session.unfocused.chunks == []  # check_fallback clears them before it weighs
        if not in_fallback:
            return -1.0
        seen.append((calls[-2], calls[-1]))
        return 1.0 if fall_back_if(len(seen) - 1) else -1.0
    monkeypatch.setattr(layout_fit, "tail_fit", fit)
    return seen


@torch.no_grad()
def test_generate_with_fallbacks_matches_the_cache_free_decode(tmp_path, monkeypatch):
    _, ctrl = _ctrl(tmp_path, every=16)
    seen = _scripted(monkeypatch, lambda j: j % 2 == 0)
    s = ctrl.begin_session(_ids(150, 27))
    snap = s.snapshot()
    stats = DecodeStats()
    cached = ctrl.generate(160, stats=stats)
    assert len(stats.fallbacks) >= 3 and stats.fallbacks == [j % 2 == 0 for j in range(len(stats.fallbacks))]
    assert stats.fallbacks == [f["fell_back"] for f in s.fallback_log]
    assert all(a != b for a, b in seen)  # each weighed two layouts
    s.restore(snap)
    ctrl.decoder.reset()
    seen.clear()
    plain_stats = DecodeStats()
    plain = ctrl.generate(160, use_cache=False, stats=plain_stats)
    assert torch.equal(cached, plain) and plain_stats.fallbacks == stats.fallbacks


@torch.no_grad()
def _by_hand(ctrl, tail: torch.Tensor, every: int) -> float:
    """The cache-free session read: logits before each token, the append, the check then the fallback when due, then
    the scheduled refocus."""
    losses = []
    for i, tok in enumerate(tail):
        losses.append(float(F.cross_entropy(ctrl.next_token_logits()[None].float(), tok.view(1))))
        ctrl.append(tok.view(1), refocus=False)
        if i + 1 < tail.numel():
            ctrl.check_refocus()
            check_fallback(ctrl)
            if (i + 1) % every == 0:
                ctrl.refocus()
    return sum(losses) / len(losses)


@torch.no_grad()
def test_session_read_with_fallbacks_equals_the_token_by_token_session(tmp_path, monkeypatch):
    _, ctrl = _ctrl(tmp_path, every=20)
    seen = _scripted(monkeypatch, lambda j: j % 2 == 0)
    ids = _ids(240, 9)
    tail = ids[-90:]
    s = ctrl.begin_session(ids[:-90])
    ctrl.refocus()
    snap = s.snapshot()
    want = _by_hand(ctrl, tail, 20)
    log = [f["fell_back"] for f in s.fallback_log]
    assert True in log and False in log and len(seen) == len(log)
    s.restore(snap)
    got, _ = wc_session_loss(ctrl, tail, every=20, refocus=lambda: len(ctrl.refocus().edits))
    assert [f["fell_back"] for f in s.fallback_log] == log
    assert got == pytest.approx(want, abs=5e-6)
    s.restore(snap)  # the random control's flag: no check and no fallback
    wc_session_loss(ctrl, tail, every=20, checks=False, refocus=lambda: len(ctrl.refocus().edits))
    assert s.fallback_log == []


def test_evaluation_reports_the_fallbacks(tmp_path):
    cfg, _ = _ctrl(tmp_path / "probe", n_docs=1, session_tail=80)
    out = run_evaluation(cfg, fake_run(tmp_path, cfg), progress=False, max_files=150)
    n = fell = 0
    for row in out["per_doc"]:
        c = row["session_checks"]
        assert 0 <= c["fell_back"] <= c["fallbacks"] <= 80 // K
        n, fell = n + c["fallbacks"], fell + c["fell_back"]
    assert n > 0
    write_report(cfg, tmp_path)
    report = (tmp_path / "report.md").read_text()
    assert f"every {K} tokens its layout was weighed against the never-refocused one" in report
    assert f"{fell} of {n} times" in report


@pytest.mark.parametrize("k, fallback, match", [(0, True, r"needs allocator.inference.refocus_check > 0"),
                                                (K, "yes", "expected true or false")])
def test_refocus_fallback_is_checked_at_start_up(k, fallback, match):
    cfg = tiny_cfg()
    cfg.allocator.inference.refocus_check, cfg.allocator.inference.refocus_fallback = k, fallback
    with pytest.raises(ConfigError, match=match):
        validate(cfg)
