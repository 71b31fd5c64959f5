"""Report: renders with and without every optional part; plots exist when matplotlib is present."""
from __future__ import annotations

import json

import pytest

import mc.app.plots
from mc.config import RunConfig
from mc.app.report import write_report


def _eval_json() -> dict:
    ci = lambda m: {"mean": m, "lo": m - 0.1, "hi": m + 0.1, "n": 4, "method": "normal"}  # noqa: E731
    acc = lambda p: {"mean": p, "lo": max(0.0, p - 0.3), "hi": min(1.0, p + 0.3), "n": 4, "k": int(4 * p),  # noqa: E731
                     "method": "wilson"}
    variants = ("full", "recency", "compressed", "focused")
    return {
        "kind": "mc-eval", "created": "2026-01-01 00:00:00", "preset": "cpu", "device": "cpu", "torch": "x",
        "seconds": 1.0, "budget": 48,
        "settings": {"doc_tokens": 256, "tail_tokens": 8, "value_len": 2},
        "documents": {"corpus": "4 windows", "n_corpus": 4, "n_recall": 4},
        "ci": {"losses": "normal", "accuracy": "wilson"},
        "variants": {v: f"({v}) label" for v in variants},
        "metrics": {"corpus_tail_loss": {v: ci(2.0 + i * 0.1) for i, v in enumerate(variants)},
                    "recall_accuracy": {v: acc(p) for v, p in zip(variants, (0.0, 0.0, 0.25, 0.75))}},
        "paired": {"corpus_tail_loss": {"focused-recency": ci(-0.2)}},
        "per_doc": [{"doc": "recall:val#0", "edits": {"tail": 2, "recall": 0},
                     "predicted": {"answer": "12", "full": "1\\x80", "recency": "00", "compressed": "13", "focused": "12"}}],
        "lod_maps": [{"source": "recall", "doc": "recall:val#0", "what": "recall prompt", "num_tokens": 40,
                      "block_size": 4, "max_lod": 2, "before": [[2, 0], [2, 1]] + [[0, t] for t in range(32, 40)],
                      "after": [[1, 0], [1, 1], [0, 8], [0, 9], [0, 10], [0, 11], [1, 3], [2, 1]]
                      + [[0, t] for t in range(32, 40)],
                      "highlights": [{"label": "queried record", "span": [9, 12]}]}],
    }


def _full_run(tmp_path):
    (tmp_path / "stage1").mkdir()
    (tmp_path / "stage1" / "metrics.jsonl").write_text(
        "\n".join(json.dumps({"step": s, "train_loss": 5.0 - s * 0.1, "lr": 1e-3, "val_loss": 5.1 - s * 0.1})
                  for s in range(1, 6)) + "\nnot json\n")
    (tmp_path / "stage2").mkdir()
    (tmp_path / "stage2" / "metrics.jsonl").write_text(
        "\n".join(json.dumps({"step": s, "lm_loss": 3.0, "pref_loss": 0.7 - 0.01 * s, "pref_acc": 0.5 + 0.01 * s,
                              "note": "text is ignored", "flag": True}) for s in range(1, 4)) + "\n")
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "eval.json").write_text(json.dumps(_eval_json()))
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "verdict.json").write_text(json.dumps({
        "passed": True, "device": "cpu", "torch_version": "x", "recompiles_after_warmup": 0, "graph_breaks": 0,
        "cudagraph": {"status": "n/a (cpu)"}, "info": {"compile_modes": {"lensnet": "reduce-overhead"}},
        "checks": {"graph_breaks": {"passed": True, "value": 0, "detail": "0 graph breaks"}}}))
    (tmp_path / "telemetry.jsonl").write_text("\n".join(json.dumps(e) for e in (
        {"kind": "compile", "trigger": "DYNAMO", "phase": "warmup", "duration_s": 1.5},
        {"kind": "compile", "trigger": "LAZY_BACKWARD", "phase": "warmup", "duration_s": 0.5},
        {"kind": "recompile", "phase": "warmup", "co_name": "forward", "reason": "size mismatch"},
        {"kind": "recompile_refused", "phase": "steady", "frame": {"function": "hook", "file": "u.py", "line": 5},
         "guards": [{"compile_id": "1/1", "guard": "flag.capture == False", "source": "u.py:6 in hook"}]},
        {"kind": "step", "step": 0})) + "\n")
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "bench.json").write_text(json.dumps({
        "device": "cpu", "device_name": "CPU", "torch": "x", "python": "3", "date": "today", "quick": True,
        "config": {"preset": "cpu", "model": {"d_model": 32, "n_layers": 1},
                   "mc": {"block_size": 4, "max_lod": 2, "max_entries": 32, "bucket_ladder": [32], "history_tokens": 64},
                   "stage2_batch": 1},
        "cudagraph": {"eager": "n/a (cpu)"},
        "rows": [{"case": "lensnet_call@32", "mode": "eager", "median_s": 0.002, "ratio_to_eager": 1.0,
                  "first_call_cold_s": 0.01, "first_call_warm_s": "n/a (eager)", "graphs": 0}]}))
    return tmp_path


def test_report_with_every_part(tmp_path):
    run = _full_run(tmp_path)
    text = write_report(RunConfig(name="t"), run).read_text()
    assert "Not available" not in text and "Missing parts" not in text
    assert "| focused | 2.300 [2.200, 2.400] (2.0 edits/refocus)" in text and "75.0%" in text
    assert "focus did nothing" not in text  # 1 of 2 refocuses idle: not more than half
    assert "focused − recency" in text
    assert "PASSED" in text and "| recompiles (with guard text; refused by freeze=fail included) | 2 |" in text
    assert "refused recompile of hook (u.py:5): 1/1: flag.capture == False [at u.py:6 in hook]" in text
    assert "lensnet_call@32" in text
    assert "1 unreadable line(s) skipped" in text  # the broken metrics line is counted, not fatal
    for png in ("lod_map_0.png", "stage1_losses.png", "stage2_losses.png", "stage2_accuracy.png", "eval_bars.png"):
        assert (run / "plots" / png).is_file(), png
        assert f"plots/{png}" in text
    assert (run / "plots" / "lod_map_0.png").stat().st_size > 2000


def test_report_with_nothing(tmp_path):
    text = write_report(RunConfig(), tmp_path).read_text()
    for part in ("stage1 metrics", "stage2 metrics", "evaluation", "harness verdict", "run telemetry", "benchmark"):
        assert part in text.split("## Missing parts")[1], part
    assert not (tmp_path / "plots").exists()


def test_report_without_matplotlib(tmp_path, monkeypatch):
    monkeypatch.setattr(mc.app.plots, "matplotlib_missing", lambda: "matplotlib is not importable (test)")
    run = _full_run(tmp_path)
    text = write_report(RunConfig(), run).read_text()
    assert "Plots skipped: matplotlib is not importable (test)" in text
    assert not (run / "plots").exists()
    assert "| focused |" in text  # tables still render


def test_report_survives_corrupt_files(tmp_path):
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "eval.json").write_text("{broken")
    text = write_report(RunConfig(), tmp_path).read_text()
    assert "eval.json` is unreadable" in text
    with pytest.raises(FileNotFoundError, match="run folder"):
        write_report(RunConfig(), tmp_path / "absent")


def test_report_warns_when_focus_did_nothing(tmp_path):
    ev = _eval_json()
    ev["per_doc"] = [{"doc": f"d{k}", "edits": {"tail": 0, "recall": 0}, "random_edits": {"tail": 0}}
                     for k in range(3)] + [{"doc": "d3", "edits": {"tail": 4}, "random_edits": {"tail": 4}}]
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "eval.json").write_text(json.dumps(ev))
    text = write_report(RunConfig(), tmp_path).read_text()
    assert "WARNING: focus did nothing** in 6 of 7 refocuses" in text
    assert "(1.0 edits/refocus)" in text  # tail: (0+0+0+4)/4 beside the focused number


def test_report_prints_the_record_rank_when_the_evaluation_has_one(tmp_path):
    (tmp_path / "eval").mkdir()
    ev = _eval_json()
    (tmp_path / "eval" / "eval.json").write_text(json.dumps(ev))
    assert "Record rank" not in write_report(RunConfig(), tmp_path).read_text()  # an older eval.json
    ev["record_rank"] = {"docs": 16, "first": 6, "ties": 3, "share": {"mean": 0.375, "lo": 0.185, "hi": 0.614},
                         "chance": 0.5, "mean_margin": 0.004, "skipped": 0}
    (tmp_path / "eval" / "eval.json").write_text(json.dumps(ev))
    text = write_report(RunConfig(), tmp_path).read_text()
    assert "queried record above every other record of its document in **6 of 16** recall documents " \
           "(38% [18%, 61%]; chance 50%; 3 tied" in text


def test_report_long_range_section(tmp_path):
    ev = _eval_json()
    variants = ["recency", "compressed", "focused", "random", "oracle"]
    cells = [{"task": t, "length": n, "multiple": n // 128, "depth": d, "variant": v, "accuracy": acc, "n": 2,
              "edits_per_refocus": 2.0 if v in ("focused", "random") else None,
              **({"needle_at_lod0": 0.5} if v == "focused" else {})}  # oracle: an older eval.json without the key
             for t in ("passkey",) for n in (512, 2048) for d in (0.1, 0.9)
             for v, acc in zip(variants, (0.0, 0.0, 0.5, 0.0, 1.0))]
    ev["long_range"] = {"base_window": 128, "budget": 48, "lengths": [512, 2048], "depths": [0.1, 0.9],
                        "tasks": ["passkey"], "variants": variants, "compression": {"512": 10.67, "2048": 42.67},
                        "cells": cells, "rows": []}
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "eval.json").write_text(json.dumps(ev))
    text = write_report(RunConfig(), tmp_path).read_text()
    assert "### Long-range sweep" in text
    assert "| focused | 50% (4), 2.0 edits, LOD0 50% | 50% (4), 2.0 edits, LOD0 50% |" in text
    assert "| oracle | 100% (4) | 100% (4) |" in text
    assert "Needle depths: exact" in text  # an older eval.json: no depth_jitter key
    ev["long_range"]["depth_jitter"] = 0.05
    (tmp_path / "eval" / "eval.json").write_text(json.dumps(ev))
    assert "spread over depth +- 0.05." in write_report(RunConfig(), tmp_path).read_text()
    for c in cells:  # branched refocus: one of the two depths' documents kept another path at 512 tokens
        if c["variant"] == "focused":
            c["other_branch"] = 0.5 if (c["length"], c["depth"]) == (512, 0.1) else 0.0
    (tmp_path / "eval" / "eval.json").write_text(json.dumps(ev))
    text = write_report(RunConfig(), tmp_path).read_text()
    assert "| focused | 50% (4), 2.0 edits, LOD0 50%, other path 25% | 50% (4), 2.0 edits, LOD0 50% |" in text
    if mc.app.plots.matplotlib_missing() is None:
        assert (tmp_path / "plots" / "long_range_passkey.png").stat().st_size > 2000


@pytest.mark.parametrize("full_acc, nll, expect", [
    (0.0, 2.30, "WARNING: the base did not learn the recall copy"),  # chance over ten digits (the seed-5 failure)
    (0.06, 0.88, "NOTE: the base recalls only 6% with the whole document in view"),  # a real model's copy, weak
    (0.94, 0.10, None),
])
def test_report_says_when_the_base_itself_cannot_recall(tmp_path, full_acc, nll, expect):
    ev = _eval_json()
    ev["metrics"]["recall_accuracy"]["full"]["mean"] = full_acc
    ev["metrics"]["recall_answer_nll"] = {"full": {"mean": nll, "lo": nll - 0.1, "hi": nll + 0.1, "n": 4,
                                                   "method": "normal"}}
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "eval.json").write_text(json.dumps(ev))
    text = write_report(RunConfig(), tmp_path).read_text()
    if expect is None:
        assert "did not learn the recall copy" not in text and "NOTE: the base recalls only" not in text
    else:
        assert expect in text


def test_report_does_not_blame_the_copy_when_full_saw_only_the_documents_end(tmp_path):
    """Documents longer than the base's window: `full` reads only their last max_seq_len tokens, so its recall near
    chance says where the record was, not that the base cannot copy; the report says that instead of the warning,
    and does not repeat it above the long-range sweep."""
    ev = _eval_json()
    ev["settings"].update(doc_tokens=2048, max_seq_len=128)
    ev["metrics"]["recall_accuracy"]["full"]["mean"] = 0.0
    ev["metrics"]["recall_answer_nll"] = {"full": {"mean": 3.7, "lo": 3.6, "hi": 3.8, "n": 4, "method": "normal"}}
    ev["long_range"] = {"base_window": 128, "budget": 72, "lengths": [512], "draw_seed": 1, "depths": [0.5],
                        "tasks": ["passkey"], "variants": ["focused"], "compression": {"512": 7.1},
                        "cells": [{"task": "passkey", "length": 512, "multiple": 4, "depth": 0.5, "variant": "focused",
                                   "accuracy": 1.0, "lo": 0.5, "hi": 1.0, "n": 4}]}
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "eval.json").write_text(json.dumps(ev))
    text = write_report(RunConfig(), tmp_path).read_text()
    assert "did not learn the recall copy" not in text and "NOTE: the base recalls only" not in text
    assert text.count("NOTE: `full` reads only the last 128 of each document's 2048 tokens") == 1
    assert "### Long-range sweep" in text
    ev["settings"]["doc_tokens"] = 128  # the same numbers with the whole document in view: the copy failed
    (tmp_path / "eval" / "eval.json").write_text(json.dumps(ev))
    text = write_report(RunConfig(), tmp_path).read_text()
    assert text.count("WARNING: the base did not learn the recall copy") == 2  # the table's, and the sweep's
    assert "NOTE: `full` reads only" not in text


@pytest.mark.parametrize("gate, expect", [
    ({"target": 0.1, "met": True, "step": 1600, "val_query_loss": 0.05},
     "Copy gate met at step 1600: validation query loss 0.0500, target 0.1"),
    ({"target": 0.1, "met": False, "step": 2400, "val_query_loss": 0.8},
     "Copy gate **NOT met** (at its cap, train.stage1.max_steps_factor: the base may not copy) at step 2400"),
    ({"target": 0.01, "met": False, "step": 1200, "val_query_loss": 0.0343, "stopped_at": 1600},
     "Copy gate **NOT met** (training on stopped at step 1600, no better: the base kept is step 1200's and may not "
     "copy) at step 1200: validation query loss 0.0343"),
    (None, None),
])
def test_report_states_the_stage1_copy_gate(tmp_path, gate, expect):
    run = _full_run(tmp_path)
    (run / "stage1" / "summary.json").write_text(json.dumps({"steps": 5, **({"copy_gate": gate} if gate else {})}))
    text = write_report(RunConfig(), run).read_text()
    if expect is None:
        assert "Copy gate" not in text
    else:
        assert expect in text
