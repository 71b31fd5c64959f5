"""Run folders tied to their config, bench opt-in, start-up errors and Ctrl-C in the run10 workflow.

Stages are fakes (``workflow.STAGE_RUNNERS``) and the harness subprocess is faked, so nothing
trains; the smoke preset is resolved for real (two different smoke configs stand in for "a
default run, then mc_run.sh"). Subprocess tests run the real entry points for a few seconds.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from _tiny_config import TINY
from mc.app import run_folder, workflow
from mc.config import to_dict
from mc.config_loading import load_config
from mc.harness.cli import resolve_harness_config

ROOT = Path(__file__).resolve().parent.parent
MC_RUN_FLAGS = ["--mc_compile_lensnet=1", "--mc_compile_lensnet_inference=1", "--mc_compile_gistnet=1"]
STAGES_RUN = ["data", "stage1", "stage2", "eval", "report"]


@pytest.fixture
def fake(monkeypatch):
    """Fake stages (recording, writing their done files) and a fake harness that passes."""
    calls: dict[str, list] = {"stages": [], "harness": []}

    def make(stage):
        def run(cfg, run_dir):
            calls["stages"].append(stage)
            for rel in workflow.DONE_FILES[stage]:
                (run_dir / rel).parent.mkdir(parents=True, exist_ok=True)
                (run_dir / rel).write_text("{}")
            return {"stage": stage}
        return run

    def harness(cmd):
        calls["harness"].append(cmd)
        cfg, _, _ = resolve_harness_config(cmd[cmd.index("--json") + 2:])
        verdict = Path(cmd[cmd.index("--json") + 1])
        verdict.parent.mkdir(parents=True, exist_ok=True)
        verdict.write_text(json.dumps({"passed": True, **workflow._expected_identity(cfg), "checks": {}}))
        return 0

    for stage in ("data", "stage1", "stage2", "eval", "bench", "report"):
        monkeypatch.setitem(workflow.STAGE_RUNNERS, stage, make(stage))
    monkeypatch.setattr(workflow, "run_harness_subprocess", harness)
    return calls


def test_default_name_comes_from_the_preset_and_the_config():
    preset = lambda p: load_config([f"preset={p}"])  # noqa: E731
    assert run_folder.default_run_name(load_config(["preset=smoke"]), preset) == "smoke"
    assert run_folder.default_run_name(load_config(["preset=smoke", "out_dir=/elsewhere"]), preset) == "smoke"
    a = run_folder.default_run_name(load_config(["preset=smoke", "compile.lensnet.train=default"]), preset)
    b = run_folder.default_run_name(load_config(["preset=smoke", "compile.lensnet.train=default"]), preset)
    c = run_folder.default_run_name(load_config(["preset=smoke", "compile.lensnet.train=reduce-overhead"]), preset)
    assert a == b and a.startswith("smoke-") and len({a, c, "smoke"}) == 3
    assert run_folder.config_diff({"name": "x", "mc": {"k": 1}}, {"name": "y", "mc": {"k": 2}}) == ["mc.k"]
    # A folder recorded before a key existed ran with its default: no difference unless the value moved.
    full = to_dict(load_config(["preset=smoke"]))
    older = {**full, "mc": {k: v for k, v in full["mc"].items() if k != "guided_variants"}}
    assert run_folder.config_diff(older, full) == []
    assert run_folder.config_diff(older, {**full, "mc": {**full["mc"], "guided_variants": 2}}) == ["mc.guided_variants"]
    # How fast, not what: a folder recorded with another prefetch depth is neither refused nor redone.
    assert run_folder.config_diff({**full, "train": {**full["train"], "prefetch": 2}}, full) == []
    assert run_folder.config_diff({**full, "train": {**full["train"], "prefetch": 2, "seed": 5}}, full) == ["train.seed"]
    assert [run_folder.first_stage(k) for k in ("model.d_model", "train.stage2.lr", "train.seed", "eval.n_docs",
                                                "bench.modes", "somethingnew")] == \
        ["stage1", "stage2", "stage1", "eval", "bench", "data"]


def test_after_a_smoke_run_mc_run_gets_its_own_folder_gate_and_every_stage(tmp_path, fake, capsys):
    out = f"out_dir={tmp_path}"
    assert workflow.main(["--preset=smoke", out]) == 0
    assert fake["stages"] == STAGES_RUN and fake["harness"] == []
    recorded = (tmp_path / "smoke" / "config.json").read_bytes()
    fake["stages"].clear()

    assert workflow.main(["--preset=smoke", *MC_RUN_FLAGS, out]) == 0  # what `bash mc_run.sh --preset smoke` runs
    assert len(fake["harness"]) == 1 and fake["stages"] == STAGES_RUN  # the gate, then every stage
    folders = sorted(p.name for p in tmp_path.iterdir())
    assert folders[0] == "smoke" and len(folders) == 2 and folders[1].startswith("smoke-")
    assert json.loads((tmp_path / folders[1] / "config.json").read_text())["compile"]["gistnet"]["inference"] \
        == "reduce-overhead"
    assert (tmp_path / "smoke" / "config.json").read_bytes() == recorded
    assert f"run folder: {tmp_path / folders[1]}" in capsys.readouterr().out


def test_a_folder_recorded_with_another_config_is_refused_with_both_ways_out(tmp_path, fake, capsys):
    out = f"out_dir={tmp_path}"
    assert workflow.main(["--preset=smoke", out]) == 0
    recorded = (tmp_path / "smoke" / "config.json").read_bytes()
    fake["stages"].clear()
    capsys.readouterr()
    for dry in ([], ["--dry-run"]):
        assert workflow.main(["--preset=smoke", "--name=smoke", *MC_RUN_FLAGS, out, *dry]) == workflow.EXIT_CONFIG
        err = capsys.readouterr().err
        assert "compile.gistnet.inference" in err and "--name=" in err and "--force=stage2" in err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 2  # the error + the --help hint
    assert fake["stages"] == [] and fake["harness"] == []
    assert (tmp_path / "smoke" / "config.json").read_bytes() == recorded

    # a model change needs stage 1 redone: --force=stage2 does not cover it
    assert workflow.main(["--preset=smoke", "--name=smoke", "model.n_layers=3", "--force=stage2", out]) == 2
    assert "model.n_layers" in capsys.readouterr().err and fake["stages"] == []
    # --force redoing every stage the keys feed is the other way out: config.json then records the new config
    assert workflow.main(["--preset=smoke", "--name=smoke", *MC_RUN_FLAGS, "--force=stage2", out]) == 0
    assert fake["stages"] == ["stage2", "eval", "report"] and len(fake["harness"]) == 1
    assert json.loads((tmp_path / "smoke" / "config.json").read_text())["compile"]["lensnet"]["train"] \
        == "reduce-overhead"


def test_mc_run_sh_dry_run_after_a_run_plans_the_gate_and_writes_nothing(tmp_path, fake):
    assert workflow.main(["--preset=smoke", f"out_dir={tmp_path}"]) == 0
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    env = dict(os.environ, VIRTUAL_ENV=sys.prefix, MC_EXTRAS="dev", OMP_NUM_THREADS="1")
    proc = subprocess.run(["bash", str(ROOT / "mc_run.sh"), "--preset", "smoke", "--dry-run", f"out_dir={tmp_path}"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "compile gate before" in proc.stdout and "stage1=run" in proc.stdout and "skip" not in proc.stdout
    assert f"run folder: {tmp_path}/smoke-" in proc.stdout
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_bench_is_opt_in_and_the_readme_lists_it_with_its_cost(tmp_path, fake):
    base = [*TINY, f"out_dir={tmp_path}", "name=b"]
    assert workflow.main(base) == 0 and "bench" not in fake["stages"]
    assert workflow.main([*base, "--stages=bench"]) == 0 and fake["stages"][-1] == "bench"
    fake["stages"].clear()
    assert workflow.main([*TINY, f"out_dir={tmp_path}", "name=b2", "bench.enabled=true"]) == 0
    assert fake["stages"] == ["data", "stage1", "stage2", "eval", "bench", "report"]
    readme = (ROOT / "README.md").read_text()
    item = readme[readme.index("`bench` (eager-vs-compiled timings) is opt-in"):][:300]
    assert "--stages=...,bench" in item and "130 s" in item and "80 s" in item, item


@pytest.mark.parametrize("override, needle", [
    ("data.files_glob=/data/*.txt", "add data=files"),
    ("mc.max_entriez=5", "did you mean mc.max_entries?"),
    ("+mc.max_entriez=5", "did you mean mc.max_entries?"),
    ("mc.recent_tokens=1", "mc.recent_tokens=1 is invalid"),
    ("train.device=cuda", "torch sees no CUDA device"),
])
def test_bad_inputs_stop_at_start_up_with_one_line(tmp_path, fake, capsys, override, needle):
    if override == "train.device=cuda" and torch.cuda.is_available():
        pytest.skip("this machine has a GPU: train.device=cuda is valid here")
    for dry in (["--dry-run"], []):
        assert workflow.main([*TINY, f"out_dir={tmp_path}", override, *dry]) == workflow.EXIT_CONFIG
        err = capsys.readouterr().err
        first = err.strip().splitlines()[0]
        assert needle in first and first.startswith("run10: error:") and "Traceback" not in err
        assert "+mc.max_entriez" not in first.split("override")[-1].split(":", 1)[-1]  # never suggests +key
    assert fake["stages"] == [] and list(tmp_path.iterdir()) == []


def test_a_checkpoint_error_in_a_stage_is_one_line(tmp_path, fake, monkeypatch, capsys):
    from mc.train.checkpoint import CheckpointError

    def broken(cfg, run_dir):
        raise CheckpointError(f"checkpoint {run_dir}/stage1/base.pt is corrupt or truncated; delete it")

    monkeypatch.setitem(workflow.STAGE_RUNNERS, "stage2", broken)
    assert workflow.main([*TINY, f"out_dir={tmp_path}", "name=c"]) == workflow.EXIT_STAGE
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip().splitlines() == [
        f"run10: error: stage stage2: checkpoint {tmp_path}/c/stage1/base.pt is corrupt or truncated; delete it"]


def test_ctrl_c_prints_one_line_not_a_traceback(tmp_path):
    body = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT / 'tests')!r})
        from _tiny_config import TINY
        from mc.app import workflow
        def slow(cfg, run_dir):
            print("SLOW STAGE", flush=True)
            time.sleep(60)
        workflow.STAGE_RUNNERS["stage1"] = slow
        sys.exit(workflow.main([*TINY, "out_dir={tmp_path}", "name=k"]))
    """)
    env = dict(os.environ, OMP_NUM_THREADS="1", MC_PROGRESS="0")
    # SIGINT back to its default in the child, as in a terminal: a suite started in the background
    # (`bash scripts/test.sh &`) passes SIGINT on as ignored, and Python then never raises KeyboardInterrupt
    proc = subprocess.Popen([sys.executable, "-c", body], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    t0 = time.time()
    for line in proc.stdout:
        if "SLOW STAGE" in line or time.time() - t0 > 120:
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == workflow.EXIT_INTERRUPTED, err
    assert "Traceback" not in err and "interrupted (Ctrl-C) during stage1" in err and "resumes" in err
