"""Benchmark: config overrides, the Markdown table, and a --quick run in a subprocess."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mc.app.bench import MODES, to_markdown
from mc.config import ConfigError, RunConfig
from mc.config_loading import apply_overrides

ROOT = Path(__file__).resolve().parent.parent


def test_apply_overrides_without_hydra():
    cfg = apply_overrides(RunConfig(), ["mc.bucket_ladder=[64,128,256]", "allocator.expand_threshold=0",
                                       "train.device=cpu", "compile.lensnet.inference=reduce-overhead"])
    assert cfg.mc.bucket_ladder == [64, 128, 256]
    assert cfg.allocator.expand_threshold == 0.0 and isinstance(cfg.allocator.expand_threshold, float)
    assert cfg.compile.lensnet.inference == "reduce-overhead"
    hydra_style = apply_overrides(RunConfig(), ["eval.long_range.variants=[focused, oracle]",
                                                "eval.long_range.depths=[0.1,0.9]"])  # bare words, as Hydra takes them
    assert hydra_style.eval.long_range.variants == ["focused", "oracle"]
    assert hydra_style.eval.long_range.depths == [0.1, 0.9]
    quoted = apply_overrides(RunConfig(), ["data.recall.templates=['{k}={v}','{k}: {v}']",
                                           "data.recall.eval_template=''"])  # quoted as Hydra takes them
    assert quoted.data.recall.eval_template == "" and quoted.data.recall.templates == ["{k}={v}", "{k}: {v}"]
    assert apply_overrides(RunConfig(), ["data.recall.eval_template='{k} is {v}'"]).data.recall.eval_template == "{k} is {v}"
    with pytest.raises(ValueError, match="unknown config key"):
        apply_overrides(RunConfig(), ["mc.nope=1"])
    with pytest.raises(ConfigError):  # validation runs after the overrides
        apply_overrides(RunConfig(), ["mc.block_size=1"])


def test_markdown_table_shape():
    res = {"device": "cpu", "device_name": "CPU test", "torch": "2.x", "python": "3.11", "date": "d", "quick": True,
           "config": {"preset": "cpu", "model": {"d_model": 32, "n_layers": 1}, "stage2_batch": 1,
                      "mc": {"block_size": 4, "max_lod": 2, "max_entries": 32, "bucket_ladder": [32],
                             "history_tokens": 64}},
           "cudagraph": {"eager": "n/a (cpu)", "default": "n/a (cpu)"},
           "rows": [{"case": "train_step", "mode": "default", "median_s": 0.5e-3, "ratio_to_eager": 0.8,
                     "first_call_cold_s": 12.0, "first_call_warm_s": 3.0, "graphs": 4}],
           "errors": {"max-autotune-no-cudagraphs": {"cold": "worker exited with 1", "stderr_tail": ["boom"]}}}
    md = to_markdown(res)
    assert "| train_step | default | 0.50 ms | 0.80x | 12.00 s | 3.00 s | 4 |" in md
    assert "CPU test" in md and "torch 2.x" in md
    assert "max-autotune-no-cudagraphs failed" in md and "boom" in md


def test_quick_bench_subprocess(tmp_path):
    """eager + default, the allocator call only, one bucket: the whole pipeline incl. the Mega-Cache."""
    out_json, out_md = tmp_path / "b.json", tmp_path / "b.md"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "mc_bench.py"), "mc.bucket_ladder=[32]",
                           "--quick", "--modes", "eager", "default", "--cases", "lensnet", "--reps", "3",
                           "--json", str(out_json), "--md", str(out_md)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    res = json.loads(out_json.read_text())
    assert res["modes"] == ["eager", "default"] and set(res["modes"]) <= set(MODES)
    rows = {(r["case"], r["mode"]): r for r in res["rows"]}
    assert set(rows) == {("lensnet_call@32", "eager"), ("lensnet_call@32", "default")}
    assert rows[("lensnet_call@32", "eager")]["ratio_to_eager"] == 1.0
    d = rows[("lensnet_call@32", "default")]
    assert d["ratio_to_eager"] > 0 and d["median_s"] > 0
    assert d["graphs"] is None or d["graphs"] >= 1  # compiled once on the first call
    assert rows[("lensnet_call@32", "eager")]["graphs"] == 0
    warm = d["first_call_warm_s"]
    assert isinstance(warm, float) or str(warm).startswith("n/a"), warm  # a time, or n/a with the reason
    md = out_md.read_text()
    assert "| case | mode | median | ratio to eager |" in md and "lensnet_call@32 | default" in md
    assert res["torch"] and res["device_name"] and res["date"]


def test_session_case_times_appends_and_refocuses_at_each_length(tmp_path):
    """The session case (eager, quick lengths 500 and 5k): one row per length and kind, and the
    scaling summary that compares the longest length with the shortest."""
    out_json, out_md = tmp_path / "s.json", tmp_path / "s.md"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "mc_bench.py"), "--quick", "--modes", "eager",
                           "--cases", "session", "--reps", "5", "--json", str(out_json), "--md", str(out_md)],
                          cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    rows = {r["case"]: r for r in json.loads(out_json.read_text())["rows"]}
    assert set(rows) == {f"session_{k}@{n}" for k in ("append", "refocus") for n in ("500", "5k")}
    assert all(r["median_s"] > 0 and r["reps"] >= 3 for r in rows.values())
    md = out_md.read_text()
    assert "session append, eager: 5k / 500 = " in md and "session refocus, eager: 5k / 500 = " in md


def test_session_lengths_are_validated():
    with pytest.raises(ConfigError, match="bench.session_lengths"):
        apply_overrides(RunConfig(), ["bench.session_lengths=[1000,0]"])


def test_decode_cases_time_themselves_and_stay_in_their_bucket():
    """The decode/refocus cases on the tiny geometry: each returns the seconds it timed (set-up excluded),
    decode@W's working contexts all sit in bucket W, and the Markdown gets the cache table."""
    import torch  # noqa: PLC0415

    from mc.app.bench import decode_table  # noqa: PLC0415
    from mc.app.bench_cases import decode_cases  # noqa: PLC0415
    from mc.build import build_controller  # noqa: PLC0415
    from mc.config_loading import load_config  # noqa: PLC0415
    from mc.working_context import bucket_for  # noqa: PLC0415
    sys.path.insert(0, str(Path(__file__).parent))
    from _tiny_config import TINY  # noqa: PLC0415

    cfg = load_config(TINY + ["telemetry.jsonl=false"])
    ctrl = build_controller(cfg, device=torch.device("cpu"))
    cases = dict(decode_cases(ctrl, cfg))
    assert set(cases) == {f"{k}@{w}/{c}" for k in ("decode_step", "decode") for w in (16, 32)
                          for c in ("cache", "nocache")} | {"refocus@32/cache", "refocus@32/nocache"}
    seen = []
    orig_append = ctrl.append

    def append(ids, **kw):  # the working context's size after every append (the prompt's too)
        orig_append(ids, **kw)
        seen.append(len(ctrl.session.wc))
    ctrl.append = append
    for name, fn in cases.items():
        seen.clear()
        assert isinstance(fn(), float) and fn() > 0, name
        if name.startswith("decode@"):
            w = int(name.split("@")[1].split("/")[0])
            assert seen and {bucket_for(n, cfg.mc.bucket_ladder) for n in seen} == {w}, (name, seen)
    rows = [{"mode": "eager", "case": "decode@32/cache", "median_s": 1e-3, "min_s": 0.5e-3},
            {"mode": "eager", "case": "decode@32/nocache", "median_s": 3.5e-3, "min_s": 2e-3}]
    assert "| decode@32 | eager | 1000 tok/s | 286 tok/s | 3.50x | 4.00x |" in decode_table(rows)
