"""One writer per run folder (mc.app.run_lock): the lock is exclusive, a killed holder's lock is taken
over, children started with the lock keep it, and two workflows on one folder never both run.

The workflow tests run ``mc.app.workflow.main`` in child processes whose stages are fakes (a slow
stage 1 that appends a line per step), so two of them can overlap without training anything.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mc.app.run_lock import LOCK_NAME, RunFolderBusy, RunLock, held_lock_fds

ROOT = Path(__file__).resolve().parent.parent
ENV = dict(os.environ, OMP_NUM_THREADS="1", MC_PROGRESS="0", PYTHONPATH=str(ROOT))


def _wait_for(proc: subprocess.Popen, marker: str, timeout: float = 120) -> None:
    t0 = time.time()
    for line in proc.stdout:
        if marker in line:
            return
        if time.time() - t0 > timeout:
            break
    pytest.fail(f"{marker!r} never came (rc {proc.poll()}): {proc.stderr.read() if proc.poll() is not None else ''}")


def test_the_lock_is_exclusive_and_a_released_lock_names_nobody(tmp_path):
    with RunLock(tmp_path / "r") as lock:
        assert held_lock_fds() == (lock.fd,)
        assert (tmp_path / "r" / LOCK_NAME).read_text() == f"{os.getpid()}\n"
        with pytest.raises(RunFolderBusy, match=rf"run folder {tmp_path / 'r'} is in use by another run \(pid {os.getpid()}\)"):
            RunLock(tmp_path / "r").acquire()
    assert held_lock_fds() == () and (tmp_path / "r" / LOCK_NAME).read_text() == ""
    with RunLock(tmp_path / "r") as again:
        assert again.previous_pid is None  # released cleanly: nothing to take over


def _holder(path: Path, *, child: bool = False) -> subprocess.Popen:
    """A process holding the lock on ``path`` (with ``child``: it also starts a sleeper that inherits it)."""
    body = textwrap.dedent(f"""
        import subprocess, sys, time
        from mc.app.run_lock import RunLock, held_lock_fds
        lock = RunLock({str(path)!r}).acquire()
        if {child}:
            kid = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], pass_fds=held_lock_fds())
            print("CHILD", kid.pid, flush=True)
        print("LOCKED", flush=True)
        time.sleep(120)
    """)
    return subprocess.Popen([sys.executable, "-c", body], cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_killed_holders_lock_is_taken_over(tmp_path):
    proc = _holder(tmp_path / "r")
    try:
        _wait_for(proc, "LOCKED")
        with pytest.raises(RunFolderBusy, match=f"pid {proc.pid}"):
            RunLock(tmp_path / "r").acquire()
    finally:
        proc.kill()  # SIGKILL: no handler runs, the kernel drops the lock
        proc.wait()
    with RunLock(tmp_path / "r") as lock:
        assert lock.previous_pid == proc.pid  # it never released: the pid it wrote is still there


def test_a_child_started_with_the_lock_keeps_the_folder_locked(tmp_path):
    """What the workflow does for torchrun and the compile harness: a SIGKILLed workflow's folder stays
    locked while a process it started still runs, and the message says so."""
    proc = _holder(tmp_path / "r", child=True)
    kid = None
    try:
        first = proc.stdout.readline()
        assert first.startswith("CHILD"), first + proc.stderr.read()
        kid = int(first.split()[1])
        _wait_for(proc, "LOCKED")
        proc.kill()
        proc.wait()
        with pytest.raises(RunFolderBusy, match=rf"pid {proc.pid} itself has ended"):
            RunLock(tmp_path / "r").acquire()
    finally:
        if proc.poll() is None:
            proc.kill()
        if kid is not None:
            os.kill(kid, signal.SIGKILL)
    for _ in range(100):  # the sleeper is reaped by init; its descriptor closes when it is gone
        try:
            RunLock(tmp_path / "r").acquire().release()
            break
        except RunFolderBusy:
            time.sleep(0.05)
    else:
        pytest.fail("the lock outlived every process that held it")


def _workflow(tmp_path: Path, tag: str, *, hold: bool = False) -> subprocess.Popen:
    """The workflow on out_dir=tmp_path, name=r, with a fake stage 1 (5 steps, one line each); with ``hold`` it
    then waits to be killed, so the test, not the machine's speed, decides when it ends."""
    body = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT / 'tests')!r})
        from _tiny_config import TINY
        from mc.app import workflow
        def slow(cfg, run_dir):
            print("STAGE1 STARTED", flush=True)
            (run_dir / "stage1").mkdir(exist_ok=True)
            for step in range(1, 6):
                with open(run_dir / "stage1" / "steps.txt", "a") as f:
                    f.write(f"{tag} {{step}}\\n")
            time.sleep(300 if {hold} else 0)
            (run_dir / "stage1" / "base.pt").write_bytes(b"w")
            return {{}}
        workflow.STAGE_RUNNERS["stage1"] = slow
        workflow.STAGE_RUNNERS["data"] = lambda cfg, run_dir: {{}}
        sys.exit(workflow.main([*TINY, "out_dir={tmp_path}", "name=r", "--stages=env,data,stage1"]))
    """)
    return subprocess.Popen([sys.executable, "-c", body], cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_two_workflows_on_one_folder_the_second_exits_2_naming_the_first(tmp_path):
    """The issue's case: two `run10.sh --name X --stages=env,data,stage1` started together both trained and
    interleaved their steps. Now the second stops at once; a rerun after a SIGKILL takes the stale lock over."""
    first = _workflow(tmp_path, "A", hold=True)
    try:
        _wait_for(first, "STAGE1 STARTED")
        second = _workflow(tmp_path, "B")
        out, err = second.communicate(timeout=120)
        assert second.returncode == 2, out + err
        assert err.strip().splitlines() == [
            f"run10: error: run folder {tmp_path / 'r'} is in use by another run (pid {first.pid}): one run writes "
            "to a folder at a time. Wait for it to finish (or stop it), or pick another folder with --name=NEW"]
        assert "STAGE1 STARTED" not in out and first.poll() is None
        first.kill()  # mid-stage, as kill -9 would
        first.wait()
    finally:
        if first.poll() is None:
            first.kill()
    steps = (tmp_path / "r" / "stage1" / "steps.txt").read_text().split()
    assert "B" not in steps  # the second run never wrote
    rerun = _workflow(tmp_path, "C")
    out, err = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, out + err
    assert f"took over the run folder's lock from pid {first.pid}" in out
    assert (tmp_path / "r" / LOCK_NAME).read_text() == ""
