"""The run10 workflow: flags, resolved config, stage skipping/forcing, and the compile gate.

Stage functions are replaced by fakes (``workflow.STAGE_RUNNERS``) so nothing trains here. The
gate tests marked ``slow`` run the REAL harness in a subprocess (tiny config, LensNet inference
compiled, shared run-local Inductor cache); the others fake the harness process.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _tiny_config import TINY  # shared (tests/_tiny_config.py)
from mc.app import workflow
from mc.config_loading import load_config

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def fake_stages(monkeypatch):
    """Replace every training/eval/report stage with a recorder that writes the stage's outputs."""
    calls: list[str] = []

    def make(stage):
        def run(cfg, run_dir):
            calls.append(stage)
            if stage == "stage1":
                (run_dir / "stage1").mkdir(parents=True, exist_ok=True)
                (run_dir / "stage1" / "base.pt").write_bytes(b"w")
            if stage == "eval":
                (run_dir / "eval").mkdir(parents=True, exist_ok=True)
                (run_dir / "eval" / "eval.json").write_text("{}")
            if stage == "bench":
                (run_dir / "bench").mkdir(parents=True, exist_ok=True)
                (run_dir / "bench" / "bench.json").write_text("{}")
            if stage == "report":
                (run_dir / "report.md").write_text("# report")
            return {"stage": stage}
        return run

    for stage in ("data", "stage1", "stage2", "eval", "bench", "report"):
        monkeypatch.setitem(workflow.STAGE_RUNNERS, stage, make(stage))
    monkeypatch.setattr(workflow, "run_harness_subprocess", lambda cmd: pytest.fail(f"harness must not run: {cmd}"))
    return calls


def base_args(tmp_path, *extra):
    return [*TINY, f"out_dir={tmp_path}", "name=r", *extra]


def test_help_lists_flags_stages_and_examples(capsys):
    assert workflow.main(["--help"]) == 0
    out = capsys.readouterr().out
    for word in ("--preset", "--mc_compile_lensnet=1", "--mc_compile_lensnet_inference=1", "--mc_compile_gistnet=1",
                 "--stages", "--force", "--dry-run", "stage1", "stage2", "report", "Examples", "key=value"):
        assert word in out
    # every preset a user can pick is named, so a new preset cannot be left out of the help
    for preset in sorted((workflow.ROOT / "configs" / "preset").glob("*.yaml")):
        assert f" {preset.stem}" in out, f"--help does not name the preset {preset.stem}"


def test_bad_flag_value_is_a_clear_error(capsys, fake_stages):
    assert workflow.main(["--mc_compile_lensnet=maybe"]) == workflow.EXIT_CONFIG
    err = capsys.readouterr().err
    assert "--mc_compile_lensnet='maybe' is invalid" in err and "Traceback" not in err
    assert workflow.main(["--stages=stage9"]) == workflow.EXIT_CONFIG
    assert "unknown stage(s) stage9" in capsys.readouterr().err
    assert workflow.main(["mc.block_size=banana"]) == workflow.EXIT_CONFIG
    assert "mc.block_size" in capsys.readouterr().err
    assert fake_stages == []


def test_dry_run_resolves_and_plans_but_writes_and_runs_nothing(tmp_path, fake_stages, capsys):
    rc = workflow.main(base_args(tmp_path, "allocator.inference.iterations=3", "--mc_compile_lensnet", "1", "--dry-run"))
    assert rc == 0 and fake_stages == []
    assert not tmp_path.joinpath("r").exists() and list(tmp_path.iterdir()) == []  # nothing written
    out = capsys.readouterr().out
    assert "allocator.inference.iterations=3" in out and "compile.lensnet.train=reduce-overhead" in out  # `--flag 1`
    assert "compile gate before" in out and "nothing written" in out


def test_stages_skip_when_done_and_force_redoes_downstream(tmp_path, fake_stages):
    assert workflow.main(base_args(tmp_path)) == 0
    assert fake_stages == ["data", "stage1", "stage2", "eval", "report"]  # bench is opt-in
    run = tmp_path / "r"
    for f in ("config.json", "env.json", "data.json", "stage1/summary.json", "stage2/summary.json"):
        assert (run / f).exists(), f
    fake_stages.clear()
    assert workflow.main(base_args(tmp_path)) == 0
    assert fake_stages == []  # everything done: only env re-checks
    assert workflow.main(base_args(tmp_path, "--force=stage2")) == 0
    assert fake_stages == ["stage2", "eval", "report"]  # downstream outputs were stale
    fake_stages.clear()
    assert workflow.main(base_args(tmp_path, "--stages=report", "--force", "report")) == 0
    assert fake_stages == ["report"]




def test_a_rerun_removes_temporaries_a_killed_run_left(tmp_path, fake_stages, capsys):
    run = tmp_path / "r"
    (run / "stage2").mkdir(parents=True)
    for stale in (run / ".config.json.k1.tmp", run / "stage2" / ".ckpt.pt.k2.tmp"):
        stale.write_bytes(b"half")
    assert workflow.main(base_args(tmp_path, "--dry-run")) == 0
    assert (run / "stage2" / ".ckpt.pt.k2.tmp").exists(), "a dry run must not touch the run folder's files"
    assert workflow.main(base_args(tmp_path, "--stages=env")) == 0
    assert not list(run.rglob("*.tmp")) and "a write a killed run left unfinished" in capsys.readouterr().out
def _write_verdict(path: Path, cfg, *, passed: bool = True, failed: str | None = None) -> None:
    checks = {"no_exception": {"passed": True, "value": 0, "detail": "ok"}}
    if failed:
        checks[failed] = {"passed": False, "value": 1, "detail": "guards: tensor 'x' size mismatch"}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"passed": passed and not failed, **workflow._expected_identity(cfg), "checks": checks}))


def test_gate_reuses_a_matching_verdict_and_reruns_when_the_hash_changes(tmp_path, fake_stages, monkeypatch, capsys):
    args = base_args(tmp_path, "--mc_compile_lensnet_inference=1", "--stages=stage2")
    verdict = tmp_path / "r" / "harness" / "verdict.json"
    _write_verdict(verdict, load_config([*TINY, "compile.lensnet.inference=reduce-overhead"]))
    assert workflow.main(args) == 0  # reused: the fixture fails the test if the harness runs
    assert fake_stages == ["stage2"] and "reusing the passing verdict" in capsys.readouterr().out

    ran: list[list[str]] = []
    changed = [*args, "allocator.inference.max_edits=3", "--force=stage2"]  # part of the compile hash

    def fake_harness(cmd):
        ran.append(cmd)
        _write_verdict(Path(cmd[cmd.index("--json") + 1]),
                       load_config([*TINY, "compile.lensnet.inference=reduce-overhead", "allocator.inference.max_edits=3"]))
        return 0

    monkeypatch.setattr(workflow, "run_harness_subprocess", fake_harness)
    assert workflow.main(changed) == 0
    assert len(ran) == 1 and "config_hash" in capsys.readouterr().out
    assert "--mc_compile_lensnet_inference=1" in ran[0] and "allocator.inference.max_edits=3" in ran[0]
    assert "--stages=stage2" not in " ".join(ran[0])  # workflow-only flags stay out of the harness
    assert workflow.main(changed) == 0 and len(ran) == 1  # now recorded: reused again
    forced = [*args, "allocator.inference.max_edits=3", "--force=stage2,harness"]
    assert workflow.main(forced) == 0 and len(ran) == 2


def test_gate_failure_names_the_check_and_the_command(tmp_path, fake_stages, monkeypatch, capsys):
    cfg = load_config([*TINY, "compile.lensnet.inference=reduce-overhead"])

    def failing(cmd):
        _write_verdict(Path(cmd[cmd.index("--json") + 1]), cfg, failed="recompiles_after_warmup")
        return 1

    monkeypatch.setattr(workflow, "run_harness_subprocess", failing)
    rc = workflow.main(base_args(tmp_path, "--mc_compile_lensnet_inference=1"))
    assert rc == workflow.EXIT_GATE
    assert fake_stages == ["data"]  # stopped before stage1: nothing trained
    err = capsys.readouterr().err
    assert "recompiles_after_warmup" in err and "mc_compile_harness.py --json" in err and "reproduce:" in err


def test_no_gate_without_compile_or_without_compiled_stages(tmp_path, fake_stages):
    assert workflow.main(base_args(tmp_path)) == 0  # compile off: the fixture would fail if the harness ran
    assert workflow.main(base_args(tmp_path, "--mc_compile_gistnet=1", "--stages=data,stage1", "--force=stage1")) == 0


def test_run10_sh_shows_the_override_in_the_resolved_config(tmp_path):
    env = dict(os.environ, VIRTUAL_ENV=sys.prefix, MC_EXTRAS="dev", OMP_NUM_THREADS="1")
    proc = subprocess.run(["bash", str(ROOT / "run10.sh"), "--preset", "smoke", "allocator.inference.iterations=3",
                           "--stages=env", f"out_dir={tmp_path}", "name=sh"], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cfg = json.loads((tmp_path / "sh" / "config.json").read_text())
    assert cfg["allocator"]["inference"]["iterations"] == 3 and cfg["preset"] == "smoke"
    assert (tmp_path / "sh" / "env.json").exists()
    assert "allocator.inference.iterations=3" in proc.stdout
    bad = subprocess.run(["bash", str(ROOT / "run10.sh"), "--mc_compile_lensnet=maybe"], capture_output=True,
                         text=True, env=env, timeout=300)
    assert bad.returncode == workflow.EXIT_CONFIG and "Traceback" not in bad.stderr and "invalid" in bad.stderr


def test_mc_run_sh_turns_compile_on(tmp_path):
    env = dict(os.environ, VIRTUAL_ENV=sys.prefix, MC_EXTRAS="dev", OMP_NUM_THREADS="1")
    proc = subprocess.run(["bash", str(ROOT / "mc_run.sh"), "--dry-run", f"out_dir={tmp_path}", "name=m"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    modes = {f"'{n}.{c}': 'reduce-overhead'" for n in ("lensnet", "gistnet") for c in ("train", "inference")}
    line = next(ln for ln in proc.stdout.splitlines() if "compile modes:" in ln)
    assert all(m in line for m in modes), line
    assert not (tmp_path / "m").exists()  # a dry run writes nothing


# ----------------------------------------------------------------------------- the gate, real harness
@pytest.fixture
def real_harness_env(monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", os.environ.get("TORCHINDUCTOR_CACHE_DIR", str(ROOT / ".cache" / "inductor")))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv("MC_HARNESS_INJECT", raising=False)


@pytest.mark.slow
def test_gate_blocks_a_failing_config(tmp_path, monkeypatch, capfd, real_harness_env):
    calls: list[str] = []
    monkeypatch.setitem(workflow.STAGE_RUNNERS, "stage2", lambda cfg, run_dir: calls.append("stage2") or {})
    monkeypatch.setenv("MC_HARNESS_INJECT", "alias")  # test hook: LensNet's helper hands out its raw output
    rc = workflow.main(base_args(tmp_path, "--mc_compile_lensnet_inference=1", "--stages=stage2"))
    assert rc == workflow.EXIT_GATE and calls == []
    err = capfd.readouterr().err
    assert "held_outputs" in err and "reproduce:" in err and "scripts/mc_compile_harness.py" in err
    verdict = json.loads((tmp_path / "r" / "harness" / "verdict.json").read_text())
    assert verdict["passed"] is False and not verdict["checks"]["held_outputs"]["passed"]


@pytest.mark.slow
def test_gate_lets_a_passing_config_through(tmp_path, monkeypatch, capfd, real_harness_env):
    calls: list[str] = []
    monkeypatch.setitem(workflow.STAGE_RUNNERS, "stage2", lambda cfg, run_dir: calls.append("stage2") or {})
    args = base_args(tmp_path, "--mc_compile_lensnet_inference=1", "--stages=stage2")
    assert workflow.main(args) == 0, capfd.readouterr()
    assert calls == ["stage2"]
    verdict = json.loads((tmp_path / "r" / "harness" / "verdict.json").read_text())
    assert verdict["passed"] is True
    assert verdict["config_hash"] == workflow._expected_identity(
        load_config([*TINY, "compile.lensnet.inference=reduce-overhead"]))["config_hash"]


def test_stage1_from_copies_another_runs_stage1_and_refuses_a_different_base(tmp_path, fake_stages, capsys):
    """`--stage1-from DIR`: a stage-2 change compared on one base. Keys that feed only stage 2 and later (here
    `mc.history_mix` and the stage-2 records region) may differ; a key stage 1 reads may not."""
    assert workflow.main(base_args(tmp_path)) == 0
    src = tmp_path / "r"
    (src / "stage1" / "metrics.jsonl").write_text('{"step": 1}\n')
    (src / "stage1" / "summary.json").write_text(json.dumps({"steps": 7}))
    fake_stages.clear()
    argv = [*TINY, f"out_dir={tmp_path}", "name=b", "--stage1-from", str(src), "mc.history_mix=[32,64]",
            "data.recall.stage2_records_region=0.9"]
    assert workflow.main(argv) == 0
    assert "stage1" not in fake_stages and "stage2" in fake_stages  # the fake trainer never ran for stage 1
    new = tmp_path / "b" / "stage1"
    assert (new / "base.pt").read_bytes() == b"w" and (new / "metrics.jsonl").read_text() == '{"step": 1}\n'
    summary = json.loads((new / "summary.json").read_text())
    assert summary["steps"] == 7 and summary["adopted_from"] == str(src.resolve())
    assert "stage1 is a copy of" in capsys.readouterr().out
    bad = [*TINY, f"out_dir={tmp_path}", "name=c", "--stage1-from", str(src), "train.seed=9"]
    assert workflow.main(bad) == 2
    err = capsys.readouterr().err
    assert "train.seed" in err and "another config" in err and not (tmp_path / "c").exists()
    assert workflow.main([*TINY, f"out_dir={tmp_path}", "name=d", f"--stage1-from={tmp_path / 'nope'}"]) == 2
    assert "no finished stage 1 there" in capsys.readouterr().err
