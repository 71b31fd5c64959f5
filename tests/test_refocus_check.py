"""The refocus check (allocator.inference.refocus_check): a refocus with edits is undone k tokens later when the layout
without its edits fits those tokens better. The replay, the decision, generate's cache and the session read."""
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
from mc.layout_fit import tail_fit
from tests.test_eval import fake_run, tiny_cfg

K = 8


def _ids(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed))


def _ctrl(tmp_path, k: int = K, every: int = 32, **eval_kw):
    cfg = tiny_cfg(**eval_kw)
    cfg.allocator.inference.refocus_check, cfg.allocator.inference.refocus_interval = k, every
    cfg = validate(cfg)
    return cfg, load_trained_controller(cfg, fake_run(tmp_path, cfg), device=torch.device("cpu"))


def _allocator_state(a) -> tuple:
    return a.clock, dict(a._expanded_into), dict(a._collapsed_into)


def _scripted_fits(monkeypatch, revert_if):
    """The check's fits replaced: each check's first (the kept layout) fits 0, its second (no edit) +1 when
    ``revert_if(j)`` for the j-th check, else -1. Returns the list of layouts each call saw."""
    seen = []

    def fit(ctrl, n=0):
        assert n == K  # the tiny config does not branch: only the check asks for a fit
        j, second = divmod(len(seen), 2)
        seen.append(ctrl.session.wc.entries)
        return (1.0 if revert_if(j) else -1.0) if second else 0.0
    monkeypatch.setattr(layout_fit, "tail_fit", fit)
    return seen


@pytest.mark.parametrize("start, chunks", [(100, [1, 1, 5, 1, 3, 1, 1, 20, 1]), (20, [3, 40, 1, 300, 1, 1, 400])])
def test_replay_layout_is_what_the_appends_made(tmp_path, start, chunks):
    """Replaying the appends on the layout they started from gives the session's layout and allocator state: from a
    refocused layout with cooldown marks, and across the level the history grows into (start 20 -> 766 tokens)."""
    _, ctrl = _ctrl(tmp_path)
    ids = _ids(start + sum(chunks), 1)
    s = ctrl.begin_session(ids[:start])
    ctrl.refocus()
    wc0, al0, lod0 = s.wc.copy(), s.allocator.copy(), s.wc.max_lod
    at = start
    for n in chunks:
        ctrl.append(ids[at: at + n], refocus=False)
        at += n
    wc, al = s.replay_layout(wc0, al0, chunks)
    assert wc.entries == s.wc.entries and wc.max_lod == s.wc.max_lod
    assert _allocator_state(al) == _allocator_state(s.allocator)
    assert wc0.max_lod == lod0  # the starting copies are not changed in place
    if start == 20:
        assert s.wc.max_lod > lod0  # the replay crossed a level growth


@torch.no_grad()
def test_check_keeps_the_layout_that_fits_the_new_tokens_better(tmp_path):
    _, ctrl = _ctrl(tmp_path)
    ids = _ids(200, 2)
    s = ctrl.begin_session(ids[:150])
    snap0 = s.snapshot()
    record = ctrl.refocus()
    assert record.edits and s.check is not None  # untrained LensNet scores still rank: the refocus edits
    for i in range(150, 150 + K - 1):
        ctrl.append(ids[i: i + 1], refocus=False)
        assert not ctrl.session.check_due()
    ctrl.append(ids[157:158], refocus=False)
    assert ctrl.session.check_due()
    snap1 = s.snapshot()
    kept_layout, kept_fit = s.wc.entries, tail_fit(ctrl, K)
    # the session had the refocus made no edit: the same start, one cooldown tick, the same appends
    s.restore(snap0)
    s.allocator.end_refocus()
    for i in range(150, 150 + K):
        ctrl.append(ids[i: i + 1], refocus=False)
    no_edit_layout, no_edit_fit = s.wc.entries, tail_fit(ctrl, K)
    assert no_edit_layout != kept_layout  # the check chooses between two layouts
    s.restore(snap1)
    assert ctrl.session.check_due()  # the snapshot holds the pending check and its appends
    reverted = ctrl.check_refocus()
    assert record.check_fits == [kept_fit, no_edit_fit] and record.reverted == reverted
    assert reverted == (no_edit_fit > kept_fit)
    assert s.wc.entries == (no_edit_layout if reverted else kept_layout)
    assert s.check is None and not ctrl.session.check_due() and ctrl.check_refocus() is None


@pytest.mark.parametrize("no_edit_fit, reverted", [(1.0, True), (-1.0, False), (0.0, False)])
@torch.no_grad()
def test_check_decides_by_the_fits(tmp_path, monkeypatch, no_edit_fit, reverted):
    """Strictly better without the edits undoes them (the appends replayed on the unedited layout); a tie keeps them."""
    _, ctrl = _ctrl(tmp_path)
    ids = _ids(200, 3)
    s = ctrl.begin_session(ids[:150])
    snap0 = s.snapshot()
    assert ctrl.refocus().edits
    ctrl.append(ids[150:158], refocus=False)  # one chunk of K: due
    kept = s.wc.entries
    s_check = s.check
    wc, _ = s.replay_layout(s_check.wc, s_check.allocator, s_check.chunks)
    monkeypatch.setattr(layout_fit, "tail_fit", lambda c, n, it=iter([0.0, no_edit_fit]): next(it))  # kept, then no edit
    assert ctrl.check_refocus() is reverted
    assert s.wc.entries == (wc.entries if reverted else kept)
    s.restore(snap0)  # the refocus, then an append with refocus on: the append runs the check when due
    monkeypatch.setattr(layout_fit, "tail_fit", lambda c, n, it=iter([0.0, no_edit_fit]): next(it))
    assert ctrl.refocus().edits
    ctrl.append(ids[150:158])
    assert s.check is None and s.refocus_log[-1].reverted is reverted


@torch.no_grad()
def test_generate_with_checks_matches_the_cache_free_decode(tmp_path, monkeypatch):
    """Undone and kept refocuses alike: the KV cache sees an undone refocus as a new layout, so the cached decode
    draws the tokens the cache-free one does."""
    _, ctrl = _ctrl(tmp_path, every=16)
    seen = _scripted_fits(monkeypatch, lambda j: j % 2 == 0)
    prompt = _ids(150, 4)
    s = ctrl.begin_session(prompt)
    snap = s.snapshot()
    stats = DecodeStats()
    cached = ctrl.generate(80, stats=stats)
    assert len(stats.checks) >= 2 and True in stats.checks and False in stats.checks
    assert any(seen[2 * j] != seen[2 * j + 1] for j in range(len(stats.checks)))  # two layouts told apart
    checked = [r for r in s.refocus_log if r.check_fits]
    assert [r.reverted for r in checked] == stats.checks
    s.restore(snap)
    ctrl.decoder.reset()
    seen.clear()
    plain_stats = DecodeStats()
    plain = ctrl.generate(80, use_cache=False, stats=plain_stats)
    assert torch.equal(cached, plain) and plain_stats.checks == stats.checks


@torch.no_grad()
def _by_hand(ctrl, tail: torch.Tensor, every: int) -> tuple[float, list[int]]:
    """The cache-free session read: logits before each token, the append, the check when due, then the scheduled
    refocus."""
    losses, edits = [], []
    for i, tok in enumerate(tail):
        losses.append(float(F.cross_entropy(ctrl.next_token_logits()[None].float(), tok.view(1))))
        ctrl.append(tok.view(1), refocus=False)
        last = i + 1 == tail.numel()
        if not last and ctrl.session.check_due():
            ctrl.check_refocus()
        if (i + 1) % every == 0 and not last:
            edits.append(len(ctrl.refocus().edits))
    return sum(losses) / len(losses), edits


@torch.no_grad()
def test_session_read_with_checks_equals_the_token_by_token_session(tmp_path, monkeypatch):
    _, ctrl = _ctrl(tmp_path, every=20)
    seen = _scripted_fits(monkeypatch, lambda j: j % 2 == 0)
    ids = _ids(240, 9)  # a draw whose refocuses edit after undone and kept checks alike
    tail = ids[-90:]
    s = ctrl.begin_session(ids[:-90])
    ctrl.refocus()
    snap = s.snapshot()
    want, want_edits = _by_hand(ctrl, tail, 20)
    n_checks = len(seen) // 2
    assert [r.reverted for r in s.refocus_log if r.check_fits] == [True, False, True, False, True]
    assert all(seen[2 * j] != seen[2 * j + 1] for j in range(n_checks))  # each check chose between two layouts
    s.restore(snap)
    seen.clear()
    got, edits = wc_session_loss(ctrl, tail, every=20, refocus=lambda: len(ctrl.refocus().edits))
    assert len(seen) // 2 == n_checks
    assert got == pytest.approx(want, abs=5e-6) and edits == want_edits


def test_evaluation_counts_the_undone_refocuses(tmp_path):
    cfg, _ = _ctrl(tmp_path / "probe", n_docs=1, session_tail=80)
    out = run_evaluation(cfg, fake_run(tmp_path, cfg), progress=False, max_files=150)
    for row in out["per_doc"]:
        c = row["session_checks"]
        assert 0 <= c["undone"] <= c["checked"] <= sum(1 for e in row["session_edits"]["focused"] if e)
    write_report(cfg, tmp_path)
    report = (tmp_path / "report.md").read_text()
    total = sum(r["session_checks"]["checked"] for r in out["per_doc"])
    assert f"checked each refocus that made edits {K} tokens later" in report and f"of {total} undone" in report


@pytest.mark.parametrize("k, every, match", [(-1, 32, "integer >= 0"), (16, 32, r"mc.recent_tokens \(16\)"),
                                             (12, 8, r"refocus_interval \(8\)"), (True, 32, "integer >= 0")])
def test_refocus_check_is_checked_at_start_up(k, every, match):
    cfg = tiny_cfg()
    cfg.allocator.inference.refocus_check, cfg.allocator.inference.refocus_interval = k, every
    with pytest.raises(ConfigError, match=match):
        validate(cfg)
