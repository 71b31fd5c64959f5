"""The GPU proof kit's CPU dry run (scripts/gpu_check.sh --dry-run): every part, tiny shapes, one report.

The bench part times the allocator LensNet call only here (``--bench-cases lensnet``): the bench
compiles from empty caches by design, and its other cases are the same code as in
tests/test_bench.py. ~60-100 s on a 2-core CPU (most of it Inductor compiling the tiny nets).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from mc.app.gpu_report import write_report

ROOT = Path(__file__).resolve().parents[1]


def _kit(*args: str, timeout: float = 600, tmp: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, MC_PYTHON=sys.executable, OMP_NUM_THREADS="1")
    if tmp is not None:  # the kit's scratch folder is made here, so a test sees what it leaves behind
        tmp.mkdir(parents=True, exist_ok=True)
        env["TMPDIR"] = str(tmp)
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(ROOT / ".cache" / "inductor"))
    return subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_gpu_check_dry_run_runs_every_part_and_writes_the_report(tmp_path):
    out = tmp_path / "kit"
    proc = _kit("--dry-run", "--out", str(out), "--bench-cases", "lensnet", tmp=tmp_path / "tmp", timeout=1200)
    failed = {p.stem: {k: d.get(k) for k in ("status", "timed_out", "seconds", "cap_s", "log_tail")}
              for p in (out / "parts").glob("*.json") for d in [json.loads(p.read_text())]
              if d.get("status") not in ("pass", "n/a (no CUDA)")}
    assert proc.returncode == 0, (failed, proc.stdout[-3000:] + proc.stderr[-2000:])  # a failed part's own log first
    assert not list((tmp_path / "tmp").glob("mc-gpu-check-scratch-*"))  # every part passed: no scratch left in /tmp
    parts = {p.stem: json.loads(p.read_text()) for p in (out / "parts").glob("*.json")}
    assert set(parts) == {"tests", "sync", "harness", "bench", "workflow", "overlap"}
    assert parts["tests"]["status"] == "n/a (no CUDA)" and parts["tests"]["figures"].get("skipped", 0) >= 1
    for name in ("sync", "harness", "bench", "workflow", "overlap"):
        assert parts[name]["status"] == "pass", (name, parts[name].get("log_tail"))
    sync = parts["sync"]["figures"]
    assert sync["meta_audit"]["passed"] and sync["cuda_sync"]["status"] == "n/a (no CUDA)"
    assert sync["timing"]["micro_step_ms"] > 0 and sync["compiles_after_warmup"] == 0
    assert parts["harness"]["figures"]["checks"]["recompiles_after_warmup"]["passed"]
    assert "reusing the passing verdict" in parts["workflow"]["figures"]["gate"]  # the harness part's verdict
    assert {r["mode"] for r in parts["bench"]["figures"]["rows"]} == {"eager", "reduce-overhead"}
    rep = json.loads((out / f"{parts['sync']['env']['date']}-cpu-dry-run.json").read_text())
    met = {t["target"]: t["met"] for t in rep["targets"]}
    assert met["no host-device sync in the stage-2 micro-step"] is True
    assert str(met["stage-2 aux cost (LensNet + GistNet + preference) <= 15 % of base fwd+bwd"]).startswith("n/a")
    md = (out / f"{parts['sync']['env']['date']}-cpu-dry-run.md").read_text()
    assert "DRY RUN on CPU" in md and "| target | value | met |" in md and "lensnet_call@32" in md
    assert len(list(out.rglob("*"))) <= 9  # 8 files + the parts folder: what a device call can bring back

    (out / f"{parts['sync']['env']['date']}-cpu-dry-run.md").unlink()  # --report-only rebuilds it from the parts
    assert write_report(out) is not None and (out / f"{parts['sync']['env']['date']}-cpu-dry-run.md").is_file()


def test_gpu_check_refuses_bad_use(tmp_path):
    proc = _kit("--dry-run", "--out", str(ROOT / "bench" / "results" / "x"), "--part", "tests", timeout=120)
    assert proc.returncode == 2 and "outside bench/results" in proc.stderr
    proc = _kit("--part", "tests,nonsense", "--out", str(tmp_path), timeout=120)
    assert proc.returncode == 2 and "unknown part" in proc.stderr
    if not torch.cuda.is_available():  # a plain run without a GPU stops with a clear message, not fake results
        proc = _kit("--part", "tests", "--out", str(tmp_path), timeout=120)
        assert proc.returncode == 2 and "no CUDA device" in proc.stderr
    assert not (tmp_path / "parts").exists()


@pytest.mark.slow
def test_smollm2_part_dry_run_trains_and_answers_the_task_suite(tmp_path):
    """``--part smollm2`` on the CPU: SmolLM2 under the smollm2 preset for 2 stage-2 steps, the evaluation and the
    task suite's passkey; its figures and its section of the report. (The GPU run joins the carried GGUF first:
    tests/test_carry_model.py.)"""
    for mod in ("transformers", "gguf", "accelerate"):
        pytest.importorskip(mod, reason="model=smollm2 needs the hf and gguf extras (scripts/setup_env.sh installs them)")
    out = tmp_path / "kit"
    proc = _kit("--dry-run", "--part", "smollm2", "--out", str(out), timeout=600, tmp=tmp_path / "tmp")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert not list((tmp_path / "tmp").glob("mc-gpu-check-scratch-*"))  # its trained run folder went with it
    part = json.loads((out / "parts" / "smollm2.json").read_text())
    assert part["status"] == "pass", part.get("log_tail")
    fig = part["figures"]
    assert fig["stage2"]["steps"] == 2 and "--preset=smollm2" == fig["preset"]
    assert set(fig["tasks_mean_over_depths"]) == {"passkey 8x full", "passkey 8x compressed", "passkey 8x oracle"}
    assert all(0.0 <= v <= 1.0 for v in fig["tasks_mean_over_depths"].values())
    assert set(fig["decode_tok_s"]) == {"kv_cache", "no_kv_cache"} and all(v > 0 for v in fig["decode_tok_s"].values())
    md = next(out.glob("*-cpu-dry-run.md")).read_text()
    assert "## smollm2: pass" in md and "tasks_mean_over_depths" in md


def test_kit_removes_its_scratch_unless_a_part_failed(tmp_path, monkeypatch, capsys):
    """The scratch folder (the dry run's trained runs, the bench and generate records) is removed after a kit whose
    parts all passed, and kept, its path printed, after one that failed: what is in it says why."""
    from mc.app.gpu_check import Kit

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    kit = Kit(True, tmp_path / "out", 60.0, {})
    (kit.scratch / "runs").mkdir()
    kit.finish(["bench"])
    assert (kit.scratch / "runs").is_dir() and str(kit.scratch) in capsys.readouterr().out
    kit.finish([])
    assert not kit.scratch.exists()
    assert not list(tmp_path.glob("mc-gpu-check-scratch-*"))


def test_report_of_one_part_says_the_other_targets_were_not_run():
    """A call that runs one part (the kit split over device calls) reports the other targets as not run, not NO."""
    from mc.app.gpu_report import TARGET_PARTS, targets

    bench = {"figures": {"rows": [{"case": "lensnet_call@128", "mode": "eager", "median_s": 3e-3},
                                  {"case": "lensnet_call@128", "mode": "reduce-overhead", "median_s": 1e-3}]}}
    out = targets({"bench": bench}, cuda=True)
    assert len(out) == len(TARGET_PARTS)
    assert out[0]["met"] is True and out[0]["value"] == "128: 3.00x"
    assert all(str(t["met"]).startswith("not run (--part ") for t in out[1:]), out
    harness_ran = targets({"bench": bench, "harness": {"figures": {}}}, cuda=True)
    assert harness_ran[1]["met"] is False  # a part that ran but recorded nothing is a failure, not "not run"


def test_smollm2_targets_read_the_passkey_means_of_the_smollm2_part():
    """The real reader's bars: oracle at 8x >= 0.9 x full at 2x, focused >= 0.8 x oracle at 8x; a part that ran
    without those cells fails them, a call without the part says "not run"."""
    from mc.app.gpu_report import targets

    def smollm2(**cells):
        return {"smollm2": {"figures": {"tasks_mean_over_depths": {k.replace("_", " "): v for k, v in cells.items()}}}}
    rows = targets(smollm2(passkey_2x_full=1.0, passkey_8x_oracle=0.917, passkey_8x_focused=0.667), cuda=True)
    oracle, focused = rows[-3], rows[-2]
    assert "oracle at 8x W" in oracle["target"] and oracle["met"] is True and oracle["value"] == "0.917 vs 1.0"
    assert "focused" in focused["target"] and focused["met"] is False  # 0.667 < 0.8 x 0.917
    assert targets(smollm2(passkey_2x_full=1.0, passkey_8x_oracle=0.0, passkey_8x_focused=0.0), cuda=True)[-3]["met"] is False
    assert targets(smollm2(), cuda=True)[-2] == {"target": focused["target"], "value": "not measured", "met": False}
    assert targets({}, cuda=True)[-2]["met"] == "not run (--part smollm2)"


def test_decode_target_reads_the_smollm2_parts_cached_and_uncached_rates():
    """The KV cache must never be the slower way to decode (the fifth GPU run's cache decoded 16 tok/s against 40
    without it); a part without both rates fails the target, a call without the part says "not run"."""
    from mc.app.gpu_report import targets

    def rates(**r):
        return {"smollm2": {"figures": {"decode_tok_s": r}}}
    row = targets(rates(kv_cache=16.5, no_kv_cache=38.1), cuda=True)[-1]
    assert "KV cache" in row["target"] and row["met"] is False and row["value"] == "16.5 vs 38.1 tok/s"
    assert targets(rates(kv_cache=52.0, no_kv_cache=38.1), cuda=True)[-1]["met"] is True
    assert targets(rates(kv_cache=None, no_kv_cache=38.1), cuda=True)[-1]["met"] is False  # a failed generate
    assert targets({}, cuda=True)[-1]["met"] == "not run (--part smollm2)"
