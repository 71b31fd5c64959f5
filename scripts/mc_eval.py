#!/usr/bin/env python
"""Evaluate a trained run (standalone entry point; the workflow calls the same function).

    python scripts/mc_eval.py --run-dir runs/default [--report] [--max-files N] [key=value ...]

The config is the run's own resolved ``config.json`` when it exists (so the evaluation matches
what was trained), with ``key=value`` overrides applied on top (e.g. ``eval.n_docs=32``);
without it, the config is resolved with Hydra from ``configs/`` (``preset=...`` works there).
Writes ``<run-dir>/eval/eval.json``; ``--report`` also renders ``<run-dir>/report.md``.
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mc.app.bench import apply_overrides, bench_config  # noqa: E402  (config helpers shared with the benchmark)
from mc.config import RunConfig, from_dict  # noqa: E402
from mc.eval.evaluate import VARIANTS, run_evaluation  # noqa: E402
from mc.eval.stats import fmt_ci  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="mc_eval.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--run-dir", type=Path, required=True, help="the run folder (holds stage1/ and stage2/)")
    p.add_argument("--report", action="store_true", help="also write <run-dir>/report.md")
    p.add_argument("--max-files", type=int, default=None, help="cap the stdlib corpus scan (quick runs)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("overrides", nargs="*", help="config overrides key.path=value")
    args = p.parse_args(argv)
    saved = args.run_dir / "config.json"
    if saved.is_file():
        cfg = apply_overrides(from_dict(RunConfig, json.loads(saved.read_text())), args.overrides)
    else:
        cfg = bench_config(args.overrides)
    res = run_evaluation(cfg, args.run_dir, progress=not args.quiet, max_files=args.max_files)
    print(f"evaluation of {args.run_dir} (budget {res['budget']} entries, {res['seconds']} s):")
    for metric, per in res["metrics"].items():
        pct = metric == "recall_accuracy"
        print(f"  {metric}: " + "; ".join(f"{v} {fmt_ci(per[v], percent=pct)}" for v in VARIANTS))
    print(f"written {args.run_dir / 'eval' / 'eval.json'}")
    if args.report:
        from mc.app.report import write_report  # noqa: PLC0415

        print(f"report {write_report(cfg, args.run_dir)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
