"""A session's read with scheduled refocuses (mc.eval.session_read, wc_session_loss): the by-hand read, the metric."""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from mc.app.report import write_report
from mc.config_checks import ConfigError, validate
from mc.eval.evaluate import load_trained_controller, run_evaluation
from mc.eval.focus_policies import random_refocus
from mc.eval.streamed import wc_session_loss, wc_stream_loss
from tests.test_eval import fake_run, tiny_cfg


def _ids(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def _by_hand(ctrl, tail: torch.Tensor, every: int, refocus) -> tuple[float, list[int]]:
    """The cache-free read a decoding session makes: logits before each token, then the append, then the
    scheduled refocus (after every ``every`` tokens, not after the last)."""
    losses, edits = [], []
    for i, tok in enumerate(tail):
        losses.append(float(F.cross_entropy(ctrl.next_token_logits()[None].float(), tok.view(1))))
        ctrl.append(tok.view(1), refocus=False)
        if (i + 1) % every == 0 and i + 1 < tail.numel():
            edits.append(refocus())
    return sum(losses) / len(losses), edits


@torch.no_grad()
@pytest.mark.parametrize("positions", ["bounded", "global"])
def test_session_read_equals_the_token_by_token_session(tmp_path, positions):
    cfg = tiny_cfg()
    cfg.mc.positions = positions
    ctrl = load_trained_controller(validate(cfg), fake_run(tmp_path, cfg), device=torch.device("cpu"))
    ids, every = _ids(240, 4), 20
    tail = ids[-90:]  # four scheduled refocuses: after 20, 40, 60 and 80 tail tokens
    ctrl.begin_session(ids[:-90])
    ctrl.refocus()
    snap = ctrl.session.snapshot()
    want, want_edits = _by_hand(ctrl, tail, every, lambda: len(ctrl.refocus().edits))
    assert len(want_edits) == 4 and sum(want_edits) > 0  # the refocuses changed layouts: the read is not vacuous
    ctrl.session.restore(snap)
    got, edits = wc_session_loss(ctrl, tail, every=every, refocus=lambda: len(ctrl.refocus().edits))
    assert got == pytest.approx(want, abs=5e-6) and edits == want_edits  # a misread segment moves it ~1e-4
    assert len(ctrl.session.wc) <= cfg.mc.max_entries
    refocused = ctrl.session.wc.entries
    ctrl.session.restore(snap)
    wc_stream_loss(ctrl, tail)
    assert ctrl.session.wc.entries != refocused  # the scheduled refocuses left another layout than plain appends

    # the random control at the same moments, with the focused session's edit counts
    counts, gen = iter(edits), torch.Generator()
    ctrl.session.restore(snap)
    gen.manual_seed(7)
    want_r, _ = _by_hand(ctrl, tail, every, lambda: random_refocus(ctrl, next(counts), gen))
    counts = iter(edits)
    ctrl.session.restore(snap)
    gen.manual_seed(7)
    got_r, edits_r = wc_session_loss(ctrl, tail, every=every, refocus=lambda: random_refocus(ctrl, next(counts), gen))
    assert got_r == pytest.approx(want_r, abs=5e-6) and len(edits_r) == 4


@torch.no_grad()
def test_session_read_without_refocus_is_the_stream_read(tmp_path):
    cfg = tiny_cfg()
    ctrl = load_trained_controller(cfg, fake_run(tmp_path, cfg), device=torch.device("cpu"))
    ids = _ids(200, 5)
    ctrl.begin_session(ids[:-60])
    snap = ctrl.session.snapshot()
    calls = []
    got, edits = wc_session_loss(ctrl, ids[-60:], every=0, refocus=lambda: calls.append(1) or 0)
    assert not calls and edits == []
    ctrl.session.restore(snap)
    assert got == wc_stream_loss(ctrl, ids[-60:])
    ctrl.session.restore(snap)
    _, edits = wc_session_loss(ctrl, ids[-60:], every=30, refocus=lambda: calls.append(1) or 3)
    assert calls == [1] and edits == [3]  # after 30 tokens; none after the 60th, the last
    with pytest.raises(ValueError, match="refocus callable"):
        wc_session_loss(ctrl, ids[-60:], every=10)
    with pytest.raises(ValueError, match="every=-1"):
        wc_session_loss(ctrl, ids[-60:], every=-1, refocus=lambda: 0)


def test_evaluation_reports_the_session_read(tmp_path):
    cfg = tiny_cfg(n_docs=2, session_tail=80)  # refocus_interval 32: refocuses at the prefix's end, after 32 and 64
    out = run_evaluation(cfg, fake_run(tmp_path, cfg), progress=False, max_files=150)
    for metric in ("corpus_session_loss", "recall_session_loss"):
        assert set(out["metrics"][metric]) == {"full", "recency", "compressed", "focused", "random"}
        assert all(ci["n"] == 2 for ci in out["metrics"][metric].values())
        assert "focused-compressed" in out["paired"][metric]
    for row in out["per_doc"]:
        e = row["session_edits"]
        assert len(e["focused"]) == len(e["random"]) == 3
        assert all(r <= f for r, f in zip(e["random"], e["focused"]))  # as many, fewer only when none is legal
        vals = row["values"][f"{row['source']}_session_loss"]
        assert all(v == v and v > 0 for v in vals.values())
    settings = json.loads((tmp_path / "eval" / "eval.json").read_text())["settings"]
    assert settings["session_tail"] == 80 and settings["refocus_interval"] == 32
    write_report(cfg, tmp_path)
    report = (tmp_path / "report.md").read_text()
    assert "corpus, as a session reads it" in report and "after every 32 tokens" in report

    off = tiny_cfg(n_docs=1)
    out = run_evaluation(off, fake_run(tmp_path / "off", off), progress=False, max_files=150)
    assert "corpus_session_loss" not in out["metrics"] and "session_edits" not in out["per_doc"][0]
    write_report(off, tmp_path / "off")
    assert "as a session reads it" not in (tmp_path / "off" / "report.md").read_text()


@pytest.mark.parametrize("tail, match", [(-1, "integer >= 0"), (32, r"\(32, 256\)"), (256, r"\(32, 256\)"),
                                         (True, "integer >= 0")])
def test_session_tail_is_checked_at_start_up(tail, match):
    with pytest.raises(ConfigError, match=match):
        tiny_cfg(session_tail=tail)
