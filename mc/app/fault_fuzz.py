"""The fault fuzz's machinery: run a case in this process or in a child, and judge its outcome.

A case (:class:`Case`) is one bad input or injected fault against the workflow (``run10``),
``mc_generate``, ``mc_eval``, ``mc_compile_harness`` or the Python API (``api``), with the outcome it
must have: the documented exit code (obsidian "Runbook": 0 done, 1 a stage / a write failed, 2 bad
flag, config, input or run folder, 3 the gate refused) and exactly one ``<prog>: error: ...`` line
on stderr, no traceback, with the case's needle in stderr; or exit 0 with the needle in stdout
(correct output). The cases live in :mod:`mc.app.fault_cases` (which imports this module, not the
other way round); :func:`main` runs them (``python scripts/mc_fault_fuzz.py``), and
``tests/test_fault_fuzz.py`` runs each as a test.

In-process cases call the CLIs' ``main`` functions with stdout/stderr captured; an exception that
escapes is a failed case (the traceback a user would have seen). Child-process cases (two workflows
on one folder, a real tmpfs) run ``python -m mc.app.workflow``, what ``run10.sh`` runs.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

ROOT = Path(__file__).resolve().parents[2]
PROGS = ("run10", "mc_generate", "mc_eval", "mc_compile_harness", "api")
# The workflow's config for every case: the smoke preset on the generated recall task, two steps a stage.
FUZZ_ARGS = ["--preset=smoke", "data=recall", "telemetry.jsonl=false",
             *(f"train.{s}.{k}={v}" for s in ("stage1", "stage2")
               for k, v in (("steps", 2), ("warmup_steps", 1), ("eval_every", 2), ("eval_batches", 1),
                            ("ckpt_every", 2)))]


@dataclass
class Outcome:
    """What a case produced. ``rc`` is the exit code (``"traceback"`` when an exception escaped);
    ``problem`` is a case's own extra check that failed (e.g. a temporary file left behind)."""

    rc: int | str
    out: str = ""
    err: str = ""
    skip: str | None = None
    problem: str | None = None


@dataclass
class Case:
    name: str  # "<prog>/<what>"
    item: str  # which part of the issue it reruns: "1 lock", "2 NaN", "3 disk", "4 small", "holds"
    rc: int
    needle: str
    run: Callable[["Workspace"], Outcome]

    @property
    def prog(self) -> str:
        return self.name.split("/", 1)[0]


def judge(case: Case, got: Outcome) -> str | None:
    """None when the outcome is what the case must give, else why not (one line)."""
    if got.problem:
        return got.problem
    if got.rc != case.rc:
        tail = (got.err.strip().splitlines() or ["(no stderr)"])[-1][:300]
        return f"exit {got.rc!r}, expected {case.rc}; stderr ends: {tail}"
    if "Traceback" in got.err:
        return "a traceback on stderr"
    if case.rc == 0:
        return None if case.needle in got.out else f"{case.needle!r} not in stdout"
    errors = [ln for ln in got.err.splitlines() if ln.startswith(f"{case.prog}: error:")]
    if len(errors) != 1:
        return f"{len(errors)} '{case.prog}: error:' lines on stderr, expected 1: {got.err.strip()[:300]}"
    return None if case.needle in got.err else f"{case.needle!r} not in stderr: {errors[0][:300]}"


def in_process(fn: Callable[..., Any], *args: Any, patches: Sequence[Any] = (), **kwargs: Any) -> Outcome:
    """``fn(*args, **kwargs)`` with stdout/stderr captured and ``patches`` (context managers) active; its
    return value is the exit code, ``SystemExit`` (argparse) counts as one, any other escape is a traceback."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        try:
            rc = fn(*args, **kwargs)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # noqa: BLE001 - what a user would have seen: keep it as the case's stderr
            traceback.print_exc(file=err)
            rc = "traceback"
    return Outcome(rc, out.getvalue(), err.getvalue())


def api_call(fn: Callable[..., Any], expected: type[BaseException], *args: Any, **kwargs: Any) -> Outcome:
    """An API case: ``expected`` raised is exit 2 with ``api: error: <message>``; returning is exit 0;
    any other exception is a traceback."""
    try:
        fn(*args, **kwargs)
    except expected as exc:
        text = str(exc)
        problem = "the message is not one line" if "\n" in text.strip() else None
        return Outcome(2, err=f"api: error: {type(exc).__name__}: {text}\n", problem=problem)
    except BaseException:  # noqa: BLE001
        return Outcome("traceback", err=traceback.format_exc())
    return Outcome(0)


def child_env() -> dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS="1", MC_PROGRESS="0", PYTHONPATH=str(ROOT))


def workflow_argv(ws: "Workspace", name: str, *extra: str) -> list[str]:
    return [*FUZZ_ARGS, f"out_dir={ws.runs}", f"name={name}", *extra]


class Workspace:
    """A temporary folder with one trained run folder (``base``: stages env..stage2 of :data:`FUZZ_ARGS`,
    trained through the workflow itself) that cases copy before they damage it."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root or tempfile.mkdtemp(prefix="mc-fault-fuzz-"))
        self.runs = self.root / "runs"
        self._base: Path | None = None
        os.environ.setdefault("MC_PROGRESS", "0")  # no progress bars in the captured stderr

    @property
    def base(self) -> Path:
        if self._base is None:
            from mc.app import workflow  # noqa: PLC0415

            got = in_process(workflow.main, workflow_argv(self, "base", "--stages=env,data,stage1,stage2"))
            if got.rc != 0:
                raise RuntimeError(f"the fuzz's run folder did not train (exit {got.rc}): {got.err[-2000:]}")
            self._base = self.runs / "base"
        return self._base

    def copy(self, name: str) -> Path:
        """A fresh copy of the trained run folder at ``runs/<name>`` (its recorded name stays ``base``: the
        CLIs read folders, and workflow cases pass ``--name`` themselves)."""
        dest = self.runs / name
        shutil.copytree(self.base, dest)
        return dest

    def file(self, name: str, data: bytes = b"x") -> Path:
        path = self.root / "files" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return path

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def run_cases(cases: Sequence[Case], ws: Workspace, *, log: Callable[[str], None] = print,
              verbose: bool = False) -> int:
    """Run every case, one line each (PASS / FAIL / SKIP, seconds, why; ``verbose``: the error line it printed);
    the number that failed."""
    failed = 0
    for case in cases:
        t0 = time.perf_counter()
        got = case.run(ws)
        why = None if got.skip else judge(case, got)
        status = "SKIP" if got.skip else "PASS" if why is None else "FAIL"
        failed += status == "FAIL"
        said = next((ln for ln in got.err.splitlines() if ln.startswith(f"{case.prog}: error:")), "")
        detail = got.skip or why or f"exit {got.rc}" + (f": {said}" if said and verbose else "")
        log(f"{status} {case.name:<44} [{case.item}] {time.perf_counter() - t0:5.1f} s  {detail}")
    return failed


def main(all_cases: Sequence[Case], argv: Sequence[str] | None = None) -> int:
    """The CLI over ``all_cases`` (``scripts/mc_fault_fuzz.py`` passes :data:`mc.app.fault_cases.CASES`)."""
    p = argparse.ArgumentParser(prog="mc_fault_fuzz.py", description="Faults and bad inputs against the "
                                "workflow, the API and the CLIs; exit 0 iff every case has its documented outcome.")
    p.add_argument("-k", dest="match", default="", help="only the cases whose name contains this")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder (its path is printed)")
    p.add_argument("-v", "--verbose", action="store_true", help="show each case's error line")
    args = p.parse_args(argv)
    cases = [c for c in all_cases if args.match in c.name]
    if args.list or not cases:
        for c in cases:
            print(f"{c.name:<44} [{c.item}] exit {c.rc}: {c.needle}")
        return 0 if cases else 2
    ws = Workspace()
    try:
        failed = run_cases(cases, ws, verbose=args.verbose)
    finally:
        if args.keep:
            print(f"workspace kept: {ws.root}")
        else:
            ws.cleanup()
    print(f"{len(cases) - failed}/{len(cases)} cases hold" + (f"; {failed} FAILED" if failed else ""))
    return 1 if failed else 0
