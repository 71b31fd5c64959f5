"""The tail read token by token (mc.eval.streamed): sliding windows, the session as it stands, the metrics."""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from mc.app.report import write_report
from mc.config_checks import validate
from mc.eval.baselines import lod0_tail_loss
from mc.eval.evaluate import Focus, load_trained_controller, run_evaluation, wc_tail_loss
from mc.eval.streamed import lod0_stream_loss, wc_stream_loss
from tests.test_eval import fake_run, tiny_cfg


@pytest.fixture(scope="module")
def ctrl(tmp_path_factory):
    cfg = tiny_cfg()
    return load_trained_controller(cfg, fake_run(tmp_path_factory.mktemp("run"), cfg), device=torch.device("cpu"))


def _ids(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def test_lod0_stream_loss_is_a_sliding_window(ctrl):
    base, ids = ctrl.base, _ids(100)
    for window, tail in ((16, 8), (40, 70), (99, 20), (200, 30)):  # late only, both regimes, early only
        want = []
        for t in range(100 - tail, 100):
            ctx = ids[max(0, t - window): t]
            want.append(float(F.cross_entropy(base(ctx[None])[0, -1:].float(), ids[t: t + 1])))
        got = lod0_stream_loss(base, ids, window=window, tail=tail, batch_tokens=7 * window)  # uneven batches
        assert got == pytest.approx(sum(want) / len(want), abs=1e-5), (window, tail)
    # with the whole prefix in view every token sees everything before it: the chunked read is the same
    assert lod0_stream_loss(base, ids, window=100, tail=30) == pytest.approx(
        lod0_tail_loss(base, ids, window=100, tail=30), abs=1e-5)
    with pytest.raises(ValueError, match="tail=100"):
        lod0_stream_loss(base, ids, window=16, tail=100)
    with pytest.raises(ValueError, match="window=0"):
        lod0_stream_loss(base, ids, window=0, tail=4)


@torch.no_grad()
@pytest.mark.parametrize("positions", ["bounded", "entries", "global", "slots"])
def test_wc_stream_loss_reads_the_session_before_each_token(tmp_path, positions):
    """The segment-wise read equals the cache-free one done by hand, token by token: collapses included, and
    (200 tokens past the 128-token window) the base's position map moving older entries under bounded/entries."""
    cfg = tiny_cfg()
    cfg.mc.positions = positions
    ctrl = load_trained_controller(validate(cfg), fake_run(tmp_path, cfg), device=torch.device("cpu"))
    ids, T = _ids(200, 1), cfg.mc.recent_tokens
    ctrl.begin_session(ids[:-T])
    ctrl.refocus()
    snap = ctrl.session.snapshot()
    want = []
    for tok in ids[-T:]:
        want.append(float(F.cross_entropy(ctrl.next_token_logits()[None].float(), tok.view(1))))
        ctrl.append(tok.view(1), refocus=False)
    ctrl.session.restore(snap)
    assert wc_stream_loss(ctrl, ids[-T:]) == pytest.approx(sum(want) / T, abs=1e-5)
    # another tail from the same restored session, after the decoder cached the first one: as the cache-free read
    other = _ids(T, 9)
    ctrl.session.restore(snap)
    want_other = []
    for tok in other:
        want_other.append(float(F.cross_entropy(ctrl.next_token_logits()[None].float(), tok.view(1))))
        ctrl.append(tok.view(1), refocus=False)
    ctrl.session.restore(snap)
    wc_stream_loss(ctrl, ids[-T:])
    ctrl.session.restore(snap)
    assert wc_stream_loss(ctrl, other) == pytest.approx(sum(want_other) / T, abs=1e-5)
    assert len(ctrl.session.wc) <= cfg.mc.max_entries
    ctrl.session = None
    with pytest.raises(RuntimeError, match="open session"):
        wc_stream_loss(ctrl, ids[-T:])


@torch.no_grad()
def test_stream_equals_chunk_without_collapses_and_differs_with_them(ctrl):
    cfg = ctrl.cfg
    B, T = cfg.mc.max_entries, cfg.eval.tail_tokens
    short = _ids(B, 2)  # fits the budget: every entry raw, nothing collapses, both reads see the same layout
    c = wc_tail_loss(ctrl, short, tail=T, focus=Focus("none"), stream=True)
    assert c["stream_loss"] == pytest.approx(c["loss"], abs=1e-5)
    assert c["stream_loss"] == pytest.approx(lod0_stream_loss(ctrl.base, short, window=B, tail=T), abs=1e-5)
    long = _ids(256, 3)  # the tail's appends collapse groups: the chunked read scores after them all
    d = wc_tail_loss(ctrl, long, tail=T, focus=Focus("lensnet"), stream=True)
    again = wc_tail_loss(ctrl, long, tail=T, focus=Focus("lensnet"))
    assert d["loss"] == again["loss"] and d["edits"] == again["edits"]  # the streamed read changed nothing else
    assert d["stream_loss"] != pytest.approx(d["loss"], abs=1e-4)


def test_evaluation_reports_the_streamed_metrics(tmp_path):
    cfg = tiny_cfg(n_docs=2)
    out = run_evaluation(cfg, fake_run(tmp_path, cfg), progress=False, max_files=150)
    for metric in ("corpus_stream_loss", "recall_stream_loss"):
        assert set(out["metrics"][metric]) == {"full", "recency", "compressed", "focused", "random"}
        assert all(ci["n"] == 2 for ci in out["metrics"][metric].values())
        assert "focused-compressed" in out["paired"][metric]
    for row in out["per_doc"]:  # the tail's appends collapse groups: the chunked read scores after them all
        key = f"{row['source']}_stream_loss"
        assert row["values"][key]["compressed"] != row["values"][f"{row['source']}_tail_loss"]["compressed"]
    write_report(cfg, tmp_path)
    report = (tmp_path / "report.md").read_text()
    assert "corpus tail, token by token" in report and "recall-doc tail, token by token" in report
    assert "The tail is read two ways" in report

    off = tiny_cfg(n_docs=2, stream_tail=False)
    out = run_evaluation(off, fake_run(tmp_path / "off", off), progress=False, max_files=150)
    assert "corpus_stream_loss" not in out["metrics"]
    assert not any("corpus_stream_loss" in r["values"] for r in out["per_doc"])
    assert json.loads((tmp_path / "off" / "eval" / "eval.json").read_text())["settings"]["stream_tail"] is False
    write_report(off, tmp_path / "off")
    assert "The tail is read two ways" not in (tmp_path / "off" / "report.md").read_text()
