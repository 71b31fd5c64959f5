"""Recompile telemetry names the culprit: every failed guard, the frame and the source line, for
steady-state compiles (freeze=warn) and for compiles fail_on_recompile refused; the harness's
``--inject hook`` verdict names the flag's guard in both modes. TORCH_LOGS is never set here.

Compile work runs in fresh subprocesses (Dynamo state is global): the monitor tests use the
``eager`` backend (no Inductor), the harness CLI test a tiny config with LensNet inference compiled.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import _subproc
from _tiny_config import TINY
from mc.compile.guards import RecompileLog, describe_all, parse_reason, parse_refused, split_recompiles

ROOT = Path(__file__).resolve().parent.parent

# A module with a user-style forward hook closing over a mutable flag; warm-up runs it with grad (train)
# and without (inference), so the cache holds a grad-mode entry that fails first on GLOBAL_STATE.
MONITOR_SCRIPT = """
    import json, torch
    from types import SimpleNamespace
    from mc.compile.boundary import CompiledNet, freeze
    from mc.compile.telemetry import Telemetry
    tel = Telemetry().start()
    m = torch.nn.Linear(4, 4)
    class Flag:
        def __init__(self):
            self.capture = False
    flag = Flag()
    def hook(mod, inputs, output):
        if flag.capture:
            flag.last = output.detach()
    m.register_forward_hook(hook)
    net = CompiledNet(m, "lensnet", SimpleNamespace(train="default", inference="default"), telemetry=tel,
                      backend="eager")
    x = torch.randn(2, 4)
    for _ in range(2):
        net(x, context="train").sum().backward()
        with torch.no_grad():
            net(x, context="inference")
    freeze("MODE", tel.monitor)
    flag.capture = True
    raised = None
    try:
        net(x, context="train")
    except RuntimeError as exc:
        raised = str(exc)[:200]
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        snap = tel.snapshot()["compile"]
    print("RESULT_JSON:" + json.dumps({"steady": snap["steady"], "events": snap["events"], "raised": raised}))
"""


def _env() -> dict:
    env = _subproc.subprocess_env()
    for key in ("TORCH_LOGS", "MC_HARNESS_INJECT"):  # the telemetry alone must name the guard
        env.pop(key, None)
    return env


@pytest.fixture(scope="module")
def monitored():
    procs = {mode: subprocess.Popen([sys.executable, "-c", textwrap.dedent(MONITOR_SCRIPT).replace("MODE", mode)],
                                    cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for mode in ("warn", "fail")}
    return {mode: _subproc.collect(p, 300) for mode, p in procs.items()}


@pytest.mark.parametrize("mode", ["warn", "fail"])
def test_monitor_records_every_failed_guard_with_frame_and_source(monitored, mode):
    res = monitored[mode]
    steady = res["steady"]
    entries = steady["recompile_guards"]
    assert len(entries) == 1, entries
    entry = entries[0]
    assert entry["refused"] is (mode == "fail") and steady["refused_recompiles"] == (mode == "fail")
    assert entry["frame"]["function"] and entry["frame"]["file"] and entry["frame"]["line"]
    guards = entry["guards"]
    assert len(guards) >= 2, guards  # one per cache entry checked, not only the first
    flag = [g for g in guards if "capture" in g["guard"]]
    assert flag and flag[0]["source"].endswith(" in hook") and ":" in flag[0]["source"], guards
    assert any("grad_mode" in g["guard"] for g in guards)  # the guard torch's metrics would have kept alone
    if mode == "warn":
        assert steady["recompiles"] == 1 and res["raised"] is None
        assert not any("capture" in r for r in steady["recompile_reasons"])  # torch's first-guard-only text
        event = next(e for e in res["events"] if e["kind"] == "recompile" and e["phase"] == "steady")
        assert any("capture" in g["guard"] for g in event["guards"])  # the JSONL event carries them too
    else:
        assert "fail_on_recompile" in res["raised"] and steady["recompiles"] == 0
        event = next(e for e in res["events"] if e["kind"] == "recompile_refused")
        assert any("capture" in g["guard"] for g in event["guards"])


def test_parsers_on_torch_texts():
    reason = ("0/1: not ___dict_contains('capture', G['m'].flag.__dict__)  # if flag.capture:  # x/y.py:6 in hook\n"
              "User stack trace:\n  File \"/src/a.py\", line 69, in inner\n    return fn()\n"
              "  File \"/src/user.py\", line 6, in hook\n    if flag.capture:")
    assert parse_reason(reason) == {"compile_id": "0/1", "source": "/src/user.py:6 in hook",
                                    "guard": "not ___dict_contains('capture', G['m'].flag.__dict__)"}
    assert parse_reason("0/0: GLOBAL_STATE changed: grad_mode ")["source"] is None
    refused = ("Detected recompile when torch.compile stance is 'fail_on_recompile'. filename: '/t/e.py', "
               "function name: 'inner', line number: 67\n    triggered by the following guard failure(s):\n"
               "    - 0/1: flag.capture == False  # if flag.capture:  # t/u.py:6 in hook\n    - User stack trace:\n"
               "    -   File \"/t/u.py\", line 6, in hook\n    -     if flag.capture:\n"
               "    - 0/0: GLOBAL_STATE changed: grad_mode ")
    got = parse_refused(refused)
    assert got["frame"] == {"function": "inner", "file": "/t/e.py", "line": 67}
    assert [g["compile_id"] for g in got["guards"]] == ["0/1", "0/0"]
    assert got["guards"][0]["source"] == "/t/u.py:6 in hook"
    assert parse_refused("RuntimeError: something else") is None
    bare = "Detected recompile when torch.compile stance is 'fail_on_recompile'. filename: 'f.py', function name: 'g', line number: 3"
    log = RecompileLog()
    log.reset(("steady",))
    entry = log.add_refused("steady", bare)  # an older torch listing no guards: its text is kept
    assert entry["frame"]["line"] == 3 and entry["guards"][0]["guard"].startswith("Detected recompile")
    assert log.summary("steady")["refused_recompiles"] == 1 and log.add_refused("steady", "other error") is None
    oldest = log.add_refused("steady", "Detected recompile when torch.compile stance is 'fail_on_recompile'")
    assert oldest["frame"]["function"] is None and "fail_on_recompile" in oldest["guards"][0]["guard"]
    frame = {"function": "f", "file": "a.py", "line": 1}
    new = [(frame, ["0/0: a", "0/1: b", "0/0: a2", "0/2: c", "0/1: b2", "0/0: a3"])]
    assert split_recompiles(new, ["0/1: b", "0/2: c"]) == [(frame, ["0/1: b", "0/0: a2"]),
                                                           (frame, ["0/2: c", "0/1: b2", "0/0: a3"])]
    assert split_recompiles([], ["0/0: lost"]) == [(None, ["0/0: lost"])]
    lines = describe_all([{"refused": True, "frame": frame, "guards": [parse_reason("0/0: x == 1")]}] * 3)
    assert lines == ["refused recompile of f (a.py:1): 0/0: x == 1 (x3)"]


@pytest.mark.slow
def test_harness_inject_hook_names_the_flag_guard_in_warn_and_fail_mode(tmp_path):
    env = _env()
    procs = {}
    for mode in ("warn", "fail"):
        cmd = [sys.executable, str(ROOT / "scripts" / "mc_compile_harness.py"), "--json", str(tmp_path / f"{mode}.json"),
               "--inject", "hook", "--mc_compile_lensnet_inference=1", f"compile.freeze={mode}", *TINY]
        procs[mode] = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for mode, proc in procs.items():
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 1, out[-3000:] + err[-3000:]
        v = json.loads((tmp_path / f"{mode}.json").read_text())
        rec = v["checks"]["recompiles_after_warmup"]
        assert not v["passed"] and not rec["passed"] and rec["value"] >= 1
        assert "capture" in rec["detail"] and "inject.py" in rec["detail"], rec["detail"]  # the guard and its line
        steady = v["info"]["compile_steady"]  # the telemetry summary the verdict records
        flagged = [g for e in steady["recompile_guards"] for g in e["guards"] if "capture" in g["guard"]]
        assert flagged and all(e["refused"] is (mode == "fail") for e in steady["recompile_guards"])
        assert "capture" in out  # the printed verdict table
