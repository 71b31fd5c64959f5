"""The compile harness: CLI verdict fields, failure demos (recompile, aliased output) named, helpers.

Compile work runs in fresh subprocesses (Dynamo state is global) with a tiny config and a shared
run-local Inductor cache (``.cache/inductor``, as scripts/test.sh uses), so only the first compile
of the session is cold. In-process tests use eager mode (every compile mode off): they exercise
the harness's logic, the poison/alias detection and the verdict without compiling.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mc.config import ConfigError, NetCompileConfig, RunConfig, from_dict
from _tiny_config import TINY  # shared (tests/_tiny_config.py)
from mc.config_loading import compile_hash, load_config
from mc.harness.cli import resolve_harness_config, split_harness_argv
from mc.harness.run import run_harness
from mc.harness.record import HarnessRecord
from mc.harness.verdict import CHECK_NAMES, build_verdict, format_table
from mc.harness.probes import RawSpy, finite_flag, max_rel_err, nonfinite, recompile_guards, storage_ptrs

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "mc_compile_harness.py"
FIELDS = ("passed", "config_hash", "torch_version", "device", "recompiles_after_warmup", "graph_breaks",
          "cudagraph", "checks")


def harness_env(**extra: str) -> dict:
    env = dict(os.environ)
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(ROOT / ".cache" / "inductor"))
    env["OMP_NUM_THREADS"] = "1"
    env.pop("MC_HARNESS_INJECT", None)
    env.update(extra)
    return env


def run_cli(args: list[str], timeout: int = 900, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT,
                          env=harness_env(**env), timeout=timeout)


def eager_cfg(*extra: str):
    return load_config(TINY + list(extra))  # compile group "eager": every mode off


# ----------------------------------------------------------------------------- CLI, compiled (subprocess)
@pytest.mark.slow
def test_cli_passes_on_tiny_config_and_writes_every_field(tmp_path):
    out = tmp_path / "v.json"
    proc = run_cli(["--json", str(out), *TINY])
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    v = json.loads(out.read_text())
    assert all(k in v for k in FIELDS)
    assert set(v["cudagraph"]) == {"status", "recordings_warmup", "recordings_steady", "skips"}
    assert set(v["checks"]) == set(CHECK_NAMES)
    assert all(set(c) == {"passed", "value", "detail"} for c in v["checks"].values())
    assert v["passed"] is True and v["recompiles_after_warmup"] == 0 and v["graph_breaks"] == 0
    assert v["cudagraph"]["status"] == "n/a (cpu)" and v["device"] == "cpu"
    assert v["torch_version"] == torch.__version__
    # no compile flag and nothing compiled in the config: the harness tests what mc_run.sh turns on
    assert v["info"]["forced_compile"] is True
    assert set(v["info"]["compile_modes"].values()) == {"reduce-overhead"}
    # the hash is of the config the harness resolved (recorded in info.config)
    assert v["config_hash"] == compile_hash(from_dict(RunConfig, v["info"]["config"]))
    assert v["info"]["config"]["mc"]["block_size"] == 4  # the TINY overrides reached the harness
    assert v["checks"]["compile_time"]["value"] > 0  # measured by the monitor
    assert "VERDICT: PASS" in proc.stdout and "eager_parity" in proc.stdout


@pytest.mark.slow
def test_injected_recompile_fails_with_the_check_named(tmp_path):
    out = tmp_path / "v.json"
    proc = run_cli(["--json", str(out), "--inject", "recompile", "--mc_compile_lensnet_inference=1", *TINY])
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    v = json.loads(out.read_text())
    rec = v["checks"]["recompiles_after_warmup"]
    assert not v["passed"] and not rec["passed"] and rec["value"] >= 1
    assert "size mismatch" in rec["detail"]  # the guard text says what changed
    assert v["recompiles_after_warmup"] >= 1
    assert "FAIL (" in proc.stdout and "recompiles_after_warmup" in proc.stdout.split("VERDICT:")[-1]
    assert v["checks"]["held_outputs"]["passed"]  # only what was injected fails (plus the exception it raised)


@pytest.mark.slow
def test_injected_aliased_output_fails_with_the_check_named(tmp_path):
    out = tmp_path / "v.json"
    proc = run_cli(["--json", str(out), "--mc_compile_lensnet_inference=1", *TINY], MC_HARNESS_INJECT="alias")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    v = json.loads(out.read_text())
    held = v["checks"]["held_outputs"]
    assert not held["passed"] and held["value"] > 0 and "ALIASED" in held["detail"]
    assert [n for n, c in v["checks"].items() if not c["passed"]] == ["held_outputs"]
    assert "VERDICT: FAIL (held_outputs)" in proc.stdout


def test_cli_bad_flag_value_is_a_clear_error():
    proc = run_cli(["--mc_compile_lensnet=maybe"], timeout=300)
    assert proc.returncode == 2
    assert "--mc_compile_lensnet='maybe' is invalid" in proc.stderr and "Traceback" not in proc.stderr


# ----------------------------------------------------------------------------- in process, eager
def test_eager_run_passes_and_reports_every_check():
    v = run_harness(eager_cfg(), log=lambda s: None)
    assert v["passed"], format_table(v)
    assert set(v["checks"]) == set(CHECK_NAMES)
    assert v["checks"]["held_outputs"]["value"] == 0
    assert v["checks"]["eager_parity"]["value"] == 0.0  # eager vs eager: identical
    assert v["checks"]["coverage"]["passed"]


def test_alias_injection_is_caught_without_compile():
    v = run_harness(eager_cfg(), inject="alias", log=lambda s: None)
    assert not v["passed"]
    assert [n for n, c in v["checks"].items() if not c["passed"]] == ["held_outputs"]
    assert "ALIASED" in v["checks"]["held_outputs"]["detail"]


def test_exception_is_captured_and_named():
    cfg = eager_cfg()
    v = run_harness(cfg, inject="recompile", log=lambda s: None)  # nothing compiled: the hook itself raises
    assert not v["checks"]["no_exception"]["passed"]
    assert "inject_recompile" in v["checks"]["no_exception"]["detail"]


# ----------------------------------------------------------------------------- helpers
def test_split_argv_takes_harness_flags_out():
    opts, rest = split_harness_argv(["--json", "a.json", "--strict", "--inject=alias", "--preset", "smoke", "x.y=1"])
    assert opts["json"] == "a.json" and opts["strict"] and opts["inject"] == "alias"
    assert rest == ["--preset", "smoke", "x.y=1"]
    with pytest.raises(ConfigError, match="--inject"):
        split_harness_argv(["--inject", "bogus"])
    with pytest.raises(ConfigError, match="--compile-budget"):
        split_harness_argv(["--compile-budget", "soon"])


def test_compile_forced_only_when_nothing_requested():
    cfg, overrides, forced = resolve_harness_config(TINY)
    assert forced and cfg.compile.lensnet == NetCompileConfig("reduce-overhead", "reduce-overhead")
    assert cfg.compile.gistnet == NetCompileConfig("reduce-overhead", "reduce-overhead")
    cfg, _, forced = resolve_harness_config(TINY + ["--mc_compile_lensnet_inference=1"])
    assert not forced and cfg.compile.lensnet == NetCompileConfig("off", "reduce-overhead")
    assert cfg.compile.gistnet == NetCompileConfig("off", "off")
    cfg, _, forced = resolve_harness_config(TINY + ["compile.gistnet.inference=default"])
    assert not forced and cfg.compile.lensnet.train == "off"


def test_raw_spy_sees_aliasing_but_not_a_clone():
    from mc.compile.boundary import CompiledNet

    class Ctl:
        compiled_lensnet = CompiledNet(torch.nn.Linear(3, 3), "lensnet", NetCompileConfig())
        compiled_gistnet = CompiledNet(torch.nn.Linear(3, 3), "gistnet", NetCompileConfig())

    ctl = Ctl()
    spy = RawSpy(ctl).install()
    raw = ctl.compiled_lensnet.run(torch.randn(2, 3), context="inference")
    assert spy.aliased("lensnet", raw[0]) and not spy.aliased("lensnet", raw.clone())
    spy.uninstall()
    assert "run" not in ctl.compiled_lensnet.__dict__
    assert storage_ptrs((raw, [raw[1]])) == {raw.untyped_storage().data_ptr()}


def test_small_helpers():
    assert max_rel_err(torch.ones(3), torch.ones(3)) == 0.0
    assert max_rel_err(torch.tensor([1.0, 2.1]), torch.tensor([1.0, 2.0])) == pytest.approx(0.05, rel=1e-4)
    assert max_rel_err(torch.ones(2), torch.ones(3)) == float("inf")
    text = ("RuntimeError: Detected recompile when torch.compile stance is 'fail_on_recompile'. filename: 'x.py'\n"
            "  triggered by the following guard failure(s):\n  - 0/0: tensor 'x' size mismatch at index 0")
    assert "size mismatch" in recompile_guards(text)
    assert recompile_guards("ValueError: bad shape") is None
    flags = [("ok", finite_flag(torch.ones(3))), ("nan", finite_flag(torch.tensor([1.0, float("nan")]))),
             ("inf", finite_flag(torch.tensor([float("inf")]))), ("ints", finite_flag(torch.arange(3)))]
    assert all(f.numel() == 1 for _, f in flags)  # a flag is kept, never the tensor (flat memory)
    assert nonfinite(flags) == ["nan", "inf"]


def test_table_names_the_failed_check():
    checks = {n: {"passed": True, "value": 0, "detail": "ok"} for n in CHECK_NAMES}
    checks["held_outputs"] = {"passed": False, "value": 2, "detail": "ALIASED"}
    v = {"passed": False, "config_hash": "abc", "torch_version": "t", "device": "cpu", "recompiles_after_warmup": 0,
         "graph_breaks": 0, "cudagraph": {"status": "n/a (cpu)", "recordings_warmup": 0, "recordings_steady": 0,
                                          "skips": 3}, "checks": checks}
    table = format_table(v)
    assert "VERDICT: FAIL (held_outputs)" in table
    assert any(line.startswith("held_outputs") and "FAIL" in line for line in table.splitlines())


# ----------------------------------------------------------------------------- verdict from a plain record
def _record(**kw) -> HarnessRecord:
    """A hand-written record of a finished CUDA run that passes every check (each test breaks one)."""
    phase = {"compiles": 3, "lazy_backward_compiles": 1, "recompiles": 0, "recompile_reasons": [], "graph_breaks": 0,
             "graph_break_reasons": [], "cudagraph_recordings": 4, "cudagraph_skips": 0, "cudagraph_skip_reasons": [],
             "compile_time_s": 1.5}
    steady = {**phase, "compiles": 0, "lazy_backward_compiles": 0, "cudagraph_recordings": 0, "compile_time_s": 0.0}
    base = dict(config_hash="h", device_type="cuda", device_label="cuda:X", compile_modes={"lensnet.train": "default"},
                warmed=True, wall_s=1.0, tensors_checked=5, monitor={"warmup": phase, "steady": steady, "notes": []},
                cudagraph_status="ok", held=[{"what": "a", "changed": False, "aliased": False, "max_abs_diff": 0.0}],
                parity={k: (0.0, "-") for k in ("train scores", "accumulated grads", "lensnet inference",
                                                "gistnet inference")},
                memory={"baseline": {"allocated": 10, "reserved": 20}, "end": {"allocated": 10, "reserved": 20}},
                counts=HarnessRecord.wanted_counts(),
                net_calls={f"{n}/{c}": 1 for n in ("lensnet", "gistnet") for c in ("train", "inference")})
    return HarnessRecord(**{**base, **kw})


def test_verdict_is_built_from_a_plain_record():
    v = build_verdict(_record())
    assert v["passed"], format_table(v)
    assert (v["device"], v["config_hash"], v["recompiles_after_warmup"], v["graph_breaks"]) == ("cuda:X", "h", 0, 0)
    assert v["cudagraph"] == {"status": "ok", "recordings_warmup": 4, "recordings_steady": 0, "skips": 0}
    json.dumps(v)  # plain data all the way down
    grown = _record(memory={"baseline": {"allocated": 0, "reserved": 0}, "end": {"allocated": 64 << 20, "reserved": 0}})
    failing = {"memory_flat": grown, "recompiles_after_warmup": _record(warmed=False),
               "finite": _record(nonfinite=["train.total[0]"]),
               "coverage": _record(counts={**HarnessRecord.wanted_counts(), "refocuses": 1}),
               "eager_parity": _record(parity={"train scores": (0.5, "micro-step 0")})}
    for name, rec in failing.items():
        v = build_verdict(rec)
        assert [n for n, c in v["checks"].items() if not c["passed"]] == [name], (name, format_table(v))
