#!/usr/bin/env python
"""Evaluate a trained run (standalone entry point; the workflow calls the same function).

    python scripts/mc_eval.py --run-dir runs/default [--report] [--max-files N] [key=value ...]
    python scripts/mc_eval.py --run-dir runs/smollm2 --tasks passkey,multikey [eval.tasks.multiples=[8,16] ...]

The config is the run's own resolved ``config.json`` when it exists (so the evaluation matches
what was trained), with ``key=value`` overrides applied on top (e.g. ``eval.n_docs=32``);
without it, the config is resolved with Hydra from ``configs/`` (``preset=...`` works there).
Writes ``<run-dir>/eval/eval.json``; ``--report`` also renders ``<run-dir>/report.md``.

It holds the run folder's lock while it writes (mc.app.run_lock): a folder a workflow is running in
is refused. Exit status: 0 done; 2 bad input (a run folder that is missing, a file or in use, an
unreadable config.json, a bad override, a missing or unreadable stage checkpoint, non-finite weights), one line
``mc_eval: error: ...``; 1 a file that cannot be written (disk full, permission), one line naming it.
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mc.app.bench import bench_config  # noqa: E402  (the benchmark's config, for a folder without one)
from mc.config_loading import apply_overrides  # noqa: E402
from mc.app.run_lock import RunLock  # noqa: E402
from mc.config import ConfigError, RunConfig, from_dict  # noqa: E402
from mc.eval.draws import fresh_draw  # noqa: E402
from mc.eval.evaluate import VARIANTS, run_evaluation  # noqa: E402
from mc.eval.stats import fmt_ci  # noqa: E402
from mc.io import describe_os_error  # noqa: E402
from mc.train.checkpoint import CheckpointError  # noqa: E402

EXIT_WRITE, EXIT_BAD_INPUT = 1, 2


class EvalInputError(ValueError):
    """Bad input for mc_eval.py; the message is the one line the user sees."""


def load_eval_config(run_dir: Path, overrides: list[str]) -> RunConfig:
    """The run's recorded config (with ``overrides``), or the configs/ one for a folder that has none yet."""
    if run_dir.exists() and not run_dir.is_dir():
        raise EvalInputError(f"--run-dir {run_dir} is a file, not a run folder; pass runs/<name>/")
    if not run_dir.is_dir():
        raise EvalInputError(f"run folder {run_dir} does not exist; train one with bash run10.sh (runs/<name>/)")
    saved = run_dir / "config.json"
    if not saved.is_file():
        return bench_config(overrides)
    try:
        cfg = from_dict(RunConfig, json.loads(saved.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError) as exc:
        raise EvalInputError(f"{saved} is not a readable run config ({exc}); re-run the workflow there") from exc
    try:
        return apply_overrides(cfg, overrides)
    except ValueError as exc:  # an unknown key or a malformed override
        raise EvalInputError(str(exc)) from exc


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="mc_eval.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--run-dir", type=Path, required=True, help="the run folder (holds stage1/ and stage2/)")
    p.add_argument("--report", action="store_true", help="also write <run-dir>/report.md")
    p.add_argument("--max-files", type=int, default=None, help="cap the stdlib corpus scan (quick runs)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--tasks", default=None, help="run only the task suite with these comma-separated tasks (passkey, "
                   "multikey, multivalue, vartrack) -> eval/tasks.json and eval/tasks.md (eval.tasks.* for the grid)")
    p.add_argument("overrides", nargs="*", help="config overrides key.path=value")
    args = p.parse_args(argv)
    try:
        overrides = list(args.overrides)
        if args.tasks is not None:
            names = [t.strip() for t in args.tasks.split(",") if t.strip()]
            if not names:
                raise EvalInputError(f"--tasks {args.tasks!r} names no task; give one or more of passkey, multikey, "
                                     "multivalue, vartrack")
            overrides.append(f"eval.tasks.tasks={json.dumps(names)}")  # JSON: both override parsers read it
        cfg = fresh_draw(load_eval_config(args.run_dir, overrides))  # a new document draw unless eval.draw_seed=N
        with RunLock(args.run_dir):  # it writes eval/ and report.md: not while a workflow runs there
            _evaluate(args, cfg)
    except (EvalInputError, ConfigError, CheckpointError) as exc:  # RunFolderBusy is a ConfigError
        return _error(str(exc), EXIT_BAD_INPUT)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError) and exc.errno is None:  # a stage output missing: names the stage to run
            return _error(str(exc), EXIT_BAD_INPUT)
        return _error(describe_os_error(exc), EXIT_WRITE)
    return 0


def _evaluate(args: argparse.Namespace, cfg: RunConfig) -> None:
    if args.tasks is not None:  # the suite alone
        from mc.app.eval_tasks import evaluate_tasks  # noqa: PLC0415
        from mc.eval.task_suite import to_markdown  # noqa: PLC0415

        print(to_markdown(evaluate_tasks(cfg, args.run_dir, progress=not args.quiet)))
        print(f"written {args.run_dir / 'eval' / 'tasks.json'} and tasks.md")
        return
    res = run_evaluation(cfg, args.run_dir, progress=not args.quiet, max_files=args.max_files)
    print(f"evaluation of {args.run_dir} (budget {res['budget']} entries, {res['seconds']} s):")
    for metric, per in res["metrics"].items():
        pct = metric == "recall_accuracy"
        print(f"  {metric}: " + "; ".join(f"{v} {fmt_ci(per[v], percent=pct)}" for v in VARIANTS))
    print(f"written {args.run_dir / 'eval' / 'eval.json'}")
    if args.report:
        from mc.app.report import write_report  # noqa: PLC0415

        print(f"report {write_report(cfg, args.run_dir)}")


def _error(msg: str, code: int) -> int:
    print(f"mc_eval: error: {msg}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
