"""Run test bodies in a fresh interpreter: Dynamo and CUDA-graph-tree state is process-global.

A script reports its result by printing one line ``RESULT_JSON:{...}``; the last such line is the
result. Failures raise AssertionError with the tails of stdout and stderr.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARK = "RESULT_JSON:"


def subprocess_env(**extra: str) -> dict:
    """One thread per worker, the run-local Inductor cache, the repo importable."""
    env = dict(os.environ)
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(ROOT / ".cache" / "inductor"))
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""), **extra)
    return env


def start(args: list[str], **env: str) -> subprocess.Popen:
    """Start ``python ARGS`` (e.g. ``["-c", body]`` or a script path) without waiting."""
    return subprocess.Popen([sys.executable, *args], cwd=str(ROOT), env=subprocess_env(**env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def collect(proc: subprocess.Popen, timeout: float, *, mark: str = MARK) -> dict:
    """Wait for ``proc`` and return its last ``mark`` line as JSON; raise with the output tails."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"subprocess timed out after {timeout} s\nstderr:\n{err[-4000:]}") from None
    lines = [ln for ln in out.splitlines() if ln.startswith(mark)]
    if proc.returncode != 0 or not lines:
        raise AssertionError(f"subprocess failed (rc={proc.returncode})\nstdout:\n{out[-3000:]}\n"
                             f"stderr:\n{err[-5000:]}")
    return json.loads(lines[-1][len(mark):])


def run_script(body: str, timeout: float = 300) -> dict:
    """Run ``body`` (dedented) in a fresh interpreter and return its result JSON."""
    return collect(start(["-c", textwrap.dedent(body)]), timeout)
