"""The fault fuzz's cases: issue #36's failures (and a few cases that already held), each with its outcome.

Grouped by the issue's items: 1 one writer per run folder, 2 non-finite weights, 3 disk and permission
faults, 4 the smaller ones, and cheap cases that held before ("holds"). Faults are real where this
machine allows it (two processes, ``chattr +i``, a private tmpfs through ``unshare``) and injected
otherwise (:mod:`mc.app.fault_inject`). Machinery, the workspace and the judging rules:
:mod:`mc.app.fault_fuzz`.
"""
from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path
from unittest import mock

from mc.app.fault_fuzz import ROOT, Case, Outcome, Workspace, api_call, child_env, in_process, workflow_argv
from mc.app.fault_inject import full_disk, immutable, left_tmp, poison, unwritable


# ----------------------------------------------------------------------------- the CLIs
def run10(ws: Workspace, name: str, *extra: str, patches=()) -> Outcome:
    from mc.app import workflow  # noqa: PLC0415

    return in_process(workflow.main, workflow_argv(ws, name, *extra), patches=patches)


def generate(*argv: str, patches=()) -> Outcome:
    from mc.app.generate import main  # noqa: PLC0415

    return in_process(main, list(argv), patches=patches)


def mc_eval(*argv: str) -> Outcome:
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.spec_from_file_location("mc_eval_script", ROOT / "scripts" / "mc_eval.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return in_process(module.main, list(argv))


def harness(*argv: str) -> Outcome:
    from mc.harness.cli import main  # noqa: PLC0415

    return in_process(main, list(argv))


# Stage 1 long enough (a few seconds) that two runs started together overlap, or a kill lands mid-stage.
LONGER = ("train.stage1.steps=20", "train.stage1.eval_every=20", "train.stage1.ckpt_every=5")


def _gen(run: Path, *extra: str) -> list[str]:
    return ["--run-dir", str(run), "--max-new-tokens", "5", *extra]


# ----------------------------------------------------------------------------- 1: one writer per run folder
def concurrent_runs(ws: Workspace) -> Outcome:
    """The issue's case: two workflows on one folder started together (their stage-1 metrics.jsonl held every
    step twice, out of order). Exactly one may run; the other must stop at once naming its pid."""
    argv = [sys.executable, "-m", "mc.app.workflow", *workflow_argv(ws, "twice", "--stages=env,data,stage1", *LONGER)]
    procs = [subprocess.Popen(argv, cwd=ROOT, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    try:
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    from mc.train.common import read_metrics  # noqa: PLC0415

    steps = [r["step"] for r in read_metrics(ws.runs / "twice" / "stage1" / "metrics.jsonl")]
    codes = sorted(p.returncode for p in procs)
    loser = next((i for i, p in enumerate(procs) if p.returncode != 0), 1)
    got = Outcome(procs[loser].returncode, *outs[loser])
    winner = procs[1 - loser]
    if codes != [0, 2]:
        got.problem = f"exit codes {[p.returncode for p in procs]}, expected one 0 and one 2: {outs[1 - loser][1][-300:]}"
    elif steps != sorted(set(steps)) or f"pid {winner.pid}" not in got.err:
        got.problem = f"stage-1 steps {steps}; the refused run's error must name pid {winner.pid}"
    return got


def stale_lock(ws: Workspace) -> Outcome:
    """kill -9 during stage 1, then the same command: the dead run's lock is taken over, and training resumes."""
    argv = [sys.executable, "-m", "mc.app.workflow", *workflow_argv(ws, "killed", "--stages=env,data,stage1", *LONGER)]
    first = subprocess.Popen(argv, cwd=ROOT, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in first.stdout:
            if "stage1: running" in line:
                break
        ended = first.poll()  # the kill must land while it holds the lock, or nothing is tested
        first.kill()
        first.wait()
    finally:
        if first.poll() is None:
            first.kill()
    again = subprocess.run(argv, cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=300)
    got = Outcome(again.returncode, again.stdout, again.stderr)
    if ended is not None:
        got.problem = f"the first run ended (exit {ended}) before the kill; make stage 1 longer (LONGER)"
    return got


# ----------------------------------------------------------------------------- 2: non-finite weights
def nan_base_generate(ws: Workspace, name: str, *extra: str) -> Outcome:
    run = ws.copy(name)
    poison(run / "stage1" / "base.pt")
    return generate(*_gen(run, *extra))


def nan_stage2_eval(ws: Workspace) -> Outcome:
    run = ws.copy("nan_eval")
    poison(run / "stage2" / "ckpt.pt", "controller")
    return mc_eval("--run-dir", str(run), "--quiet")


def nan_base_harness(ws: Workspace) -> Outcome:
    run = ws.copy("nan_harness")
    poison(run / "stage1" / "base.pt")
    return harness("--preset=smoke", "--base-weights", str(run / "stage1" / "base.pt"))


def nan_stage2_resume(ws: Workspace) -> Outcome:
    run = ws.copy("nan_resume")
    poison(run / "stage2" / "ckpt.pt", "controller")
    (run / "stage2" / "summary.json").unlink()  # so stage 2 runs: it must refuse the checkpoint, not resume it
    return run10(ws, "nan_resume", "--stages=stage2")


def api_nan_base(ws: Workspace, how: str) -> Outcome:
    from mc.build import build_controller, load_run  # noqa: PLC0415
    from mc.config import RunConfig, from_dict  # noqa: PLC0415
    from mc.train.checkpoint import CheckpointError  # noqa: PLC0415

    run = ws.copy(f"api_nan_{how}")
    poison(run / "stage1" / "base.pt")
    if how == "load_run":
        return api_call(load_run, CheckpointError, run)
    import json  # noqa: PLC0415

    cfg = from_dict(RunConfig, json.loads((run / "config.json").read_text()))
    return api_call(build_controller, CheckpointError, cfg, base_weights=run / "stage1" / "base.pt")


# ----------------------------------------------------------------------------- 3: disk and permission faults
def full_disk_workflow(ws: Workspace) -> Outcome:
    got = run10(ws, "full", "--stages=env,data,stage1", patches=[full_disk(64_000)])  # the JSONs fit, a checkpoint not
    got.problem = left_tmp(ws.runs / "full")
    return got


def full_disk_tmpfs(ws: Workspace) -> Outcome:
    """The issue's own set-up: the run folder on a 1.2 MB tmpfs (a private mount namespace: nothing outside
    sees it); afterwards no temporary file may be left on it."""
    if shutil.which("unshare") is None:
        return Outcome(0, skip="needs unshare(1) for a private tmpfs")
    mnt = ws.root / "tmpfs"
    mnt.mkdir(exist_ok=True)
    script = ('mount -t tmpfs -o size=1200k tmpfs "$1" || { echo NOMOUNT; exit 0; }; shift; "$@"; rc=$?; '
              'find "$MNT" -name "*.tmp" -printf "LEFT %p\\n"; exit $rc')
    argv = [sys.executable, "-m", "mc.app.workflow", "--preset=smoke", "data=recall", f"out_dir={mnt}", "name=full",
            "--stages=env,data,stage1", "train.stage1.steps=2", "train.stage1.ckpt_every=1"]
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", script, "sh", str(mnt), *argv], cwd=ROOT, timeout=300,
                          env=dict(child_env(), MNT=str(mnt)), capture_output=True, text=True)
    if "NOMOUNT" in proc.stdout or (proc.returncode != 0 and "unshare" in proc.stderr):
        return Outcome(0, skip=f"cannot mount a private tmpfs here: {proc.stderr.strip()[:120]}")
    got = Outcome(proc.returncode, proc.stdout, proc.stderr)
    if "LEFT " in proc.stdout:
        got.problem = "temporaries left: " + " ".join(ln for ln in proc.stdout.splitlines() if ln.startswith("LEFT"))
    return got


def immutable_run_folder(ws: Workspace) -> Outcome:
    run = ws.copy("immutable")
    with immutable(run) as how:
        got = run10(ws, "immutable", "--stages=env")
    got.out += f"\n({how})"
    return got


def read_only_run_folder(ws: Workspace) -> Outcome:
    run = ws.copy("read_only")
    (run / ".lock").unlink()  # a fresh mount: the lock file itself cannot be created
    return run10(ws, "read_only", "--stages=env", patches=[unwritable(run, errno.EROFS)])


def generate_json_full_disk(ws: Workspace) -> Outcome:
    out = ws.root / "files" / "out.json"
    got = generate(*_gen(ws.base, "--prompt", "def ", "--json", str(out)), patches=[full_disk(0)])
    got.problem = left_tmp(out.parent) or (f"{out} exists" if out.exists() else None)
    return got


def harness_json_unwritable(ws: Workspace) -> Outcome:
    """The harness's verdict file cannot be written. The harness run itself is replaced by a passing verdict
    (compiling takes minutes); what is tested is the CLI's write of it."""
    import mc.harness.cli as cli  # noqa: PLC0415

    def passing(cfg, **kwargs):
        return {"passed": True, "config_hash": "0", "torch_version": "t", "device": "cpu", "recompiles_after_warmup": 0,
                "graph_breaks": 0, "checks": {}, "info": {},
                "cudagraph": {"status": "n/a", "recordings_warmup": 0, "recordings_steady": 0, "skips": 0}}

    verdict = ws.file("plain") / "verdict.json"
    return in_process(cli.main, ["--preset=smoke", "--json", str(verdict)],
                      patches=[mock.patch.object(cli, "run_harness", passing)])


# ----------------------------------------------------------------------------- 4: the smaller ones
def load_config_string(ws: Workspace) -> Outcome:
    from mc.config import ConfigError  # noqa: PLC0415
    from mc.config_loading import load_config  # noqa: PLC0415

    return api_call(load_config, ConfigError, "a=b")


def name_escapes(ws: Workspace) -> Outcome:
    got = run10(ws, "../../elsewhere")
    if (ws.runs / "../../elsewhere").resolve().exists():
        got.problem = "a folder was created outside runs/"
    return got


def gate_reproduce(ws: Workspace) -> Outcome:
    """The gate's printed command must reproduce the failure: it carries MC_HARNESS_INJECT when that made it fail.
    The harness itself is faked (a failed verdict for exactly this config): the real one takes minutes to compile."""
    import json  # noqa: PLC0415

    from mc.app import workflow  # noqa: PLC0415
    from mc.harness.cli import resolve_harness_config  # noqa: PLC0415

    def failing(cmd: list[str]) -> int:
        cfg, _, _ = resolve_harness_config(cmd[cmd.index("--json") + 2:])
        verdict = Path(cmd[cmd.index("--json") + 1])
        verdict.parent.mkdir(parents=True, exist_ok=True)
        verdict.write_text(json.dumps({"passed": False, **workflow._expected_identity(cfg), "checks": {
            "recompiles_after_warmup": {"passed": False, "value": 1, "detail": "refused recompile of capture_hook"}}}))
        return 1

    patches = [mock.patch.dict(os.environ, {"MC_HARNESS_INJECT": "hook"}),
               mock.patch.object(workflow, "run_harness_subprocess", failing)]
    return run10(ws, "gate", "--mc_compile_lensnet_inference=1", "--stages=stage2", patches=patches)


def garbage_base(ws: Workspace) -> Outcome:
    run = ws.copy("garbage")
    (run / "stage1" / "base.pt").write_bytes(b"garbage")
    shutil.rmtree(run / "stage2")  # stage 2 from scratch: it loads the base weights first
    return run10(ws, "garbage", "--stages=stage2")


def truncated_stage2(ws: Workspace) -> Outcome:
    run = ws.copy("trunc")
    (run / "stage2" / "ckpt.pt").write_bytes(b"PK\x03\x04half")  # a zip header, then nothing
    return generate(*_gen(run, "--prompt", "def "))


def generate_ok(ws: Workspace) -> Outcome:
    got = generate(*_gen(ws.base, "--prompt", "def "))
    if got.rc == 0 and "5 new tokens" not in got.err:
        got.problem = f"no summary of 5 new tokens: {got.err[-200:]}"
    return got


CASES: list[Case] = [
    # 1: one writer per run folder
    Case("run10/concurrent-runs-same-folder", "1 lock", 2, "is in use by another run (pid", concurrent_runs),
    Case("run10/stale-lock-after-kill-9", "1 lock", 0, "took over the run folder's lock from pid", stale_lock),
    # 2: non-finite weights, at every load site
    Case("mc_generate/nan-base-short-prompt", "2 NaN", 2, "holds non-finite weights",
         lambda ws: nan_base_generate(ws, "nan_short", "--prompt", "def ")),
    Case("mc_generate/nan-base-long-prompt", "2 NaN", 2, "holds non-finite weights",
         lambda ws: nan_base_generate(ws, "nan_long", "--prompt", "def f(x):\n    return x\n" * 20)),
    Case("mc_generate/nan-base-no-kv-cache", "2 NaN", 2, "holds non-finite weights",
         lambda ws: nan_base_generate(ws, "nan_nocache", "--prompt", "def ", "--no-kv-cache")),
    Case("api/load_run-nan-base", "2 NaN", 2, "base.pt holds non-finite weights", lambda ws: api_nan_base(ws, "load_run")),
    Case("api/build_controller-nan-base", "2 NaN", 2, "base.pt holds non-finite weights",
         lambda ws: api_nan_base(ws, "build")),
    Case("mc_eval/nan-stage2", "2 NaN", 2, "ckpt.pt holds non-finite weights", nan_stage2_eval),
    Case("mc_compile_harness/nan-base-weights", "2 NaN", 2, "holds non-finite weights", nan_base_harness),
    Case("run10/resume-stage2-from-nan-checkpoint", "2 NaN", 1, "cannot resume from it", nan_stage2_resume),
    Case("run10/diverging-lr", "2 NaN", 1, "nothing was saved after that",
         lambda ws: run10(ws, "diverge", "--stages=env,data,stage1", "train.stage1.lr=1e30")),
    # 3: disk and permission faults
    Case("run10/full-disk-injected", "3 disk", 1, "No space left on device (ENOSPC)", full_disk_workflow),
    Case("run10/full-disk-tmpfs", "3 disk", 1, "No space left on device (ENOSPC)", full_disk_tmpfs),
    Case("run10/immutable-run-folder", "3 disk", 1, "cannot write", immutable_run_folder),
    Case("run10/read-only-run-folder", "3 disk", 1, "Read-only file system (EROFS)", read_only_run_folder),
    Case("mc_generate/json-full-disk", "3 disk", 1, "No space left on device (ENOSPC)", generate_json_full_disk),
    Case("mc_compile_harness/json-unwritable", "3 disk", 1, "Not a directory (ENOTDIR)", harness_json_unwritable),
    # 4: the smaller ones
    Case("run10/stages-empty", "4 small", 2, "names no stage", lambda ws: run10(ws, "e", "--stages=")),
    Case("run10/force-empty", "4 small", 2, "names no stage", lambda ws: run10(ws, "e", "--force=")),
    Case("run10/name-escapes-runs", "4 small", 2, "run name '../../elsewhere' is invalid", name_escapes),
    Case("run10/name-with-slash", "4 small", 2, "run name 'a/b' is invalid", lambda ws: run10(ws, "a/b")),
    Case("api/load_config-string", "4 small", 2, "takes a list of 'key=value' overrides", load_config_string),
    Case("mc_eval/missing-run-dir", "4 small", 2, "does not exist",
         lambda ws: mc_eval("--run-dir", str(ws.root / "nope"), "--quiet")),
    Case("mc_eval/run-dir-is-a-file", "4 small", 2, "is a file",
         lambda ws: mc_eval("--run-dir", str(ws.file("a_file")), "--quiet")),
    Case("mc_generate/json-unwritable", "4 small", 1, "Not a directory (ENOTDIR)",
         lambda ws: generate(*_gen(ws.base, "--prompt", "def ", "--json", str(ws.file("plain") / "out.json")))),
    Case("mc_generate/json-is-a-directory", "4 small", 2, "is a directory",
         lambda ws: generate(*_gen(ws.base, "--prompt", "def ", "--json", str(ws.root)))),
    Case("mc_generate/prompt-file-is-a-directory", "4 small", 2, "is a directory; pass a text file",
         lambda ws: generate(*_gen(ws.base, "--prompt-file", str(ws.root)))),
    Case("mc_generate/run-dir-is-a-file", "4 small", 2, "is a file, not a folder",
         lambda ws: generate(*_gen(ws.file("a_file"), "--prompt", "def "))),
    Case("mc_compile_harness/missing-base-weights", "4 small", 2, "no such file",
         lambda ws: harness("--preset=smoke", "--base-weights", str(ws.root / "nope.pt"))),
    Case("run10/gate-reproduce-carries-the-injection", "4 small", 3, "MC_HARNESS_INJECT=hook ", gate_reproduce),
    # cases that held before: still one line with their exit code, or the right output
    Case("mc_generate/ok", "holds", 0, "", generate_ok),
    Case("mc_generate/missing-run-dir", "holds", 2, "does not exist",
         lambda ws: generate(*_gen(ws.root / "nope", "--prompt", "def "))),
    Case("mc_generate/truncated-stage2", "holds", 2, "corrupt or truncated", truncated_stage2),
    Case("run10/garbage-base-weights", "holds", 1, "corrupt or truncated", garbage_base),
    Case("run10/bad-flag-value", "holds", 2, "--mc_compile_lensnet='maybe' is invalid",
         lambda ws: run10(ws, "b", "--mc_compile_lensnet=maybe")),
    Case("mc_compile_harness/bad-inject", "holds", 2, "--inject='nope' is invalid",
         lambda ws: harness("--preset=smoke", "--inject=nope")),
]
