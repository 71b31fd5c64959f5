#!/usr/bin/env python
"""Measure each refocus rule on and off on a trained run (obsidian Focus Allocator, "Which rules stay").

    python scripts/mc_ablate.py --run-dir runs/long [--draw-seed N] [--arm "name:key=value,key=value" ...]
                                [--salience] [key=value ...]

Runs the run's long-range sweep once with all its rules and once per arm (default: each rule of the `long`
preset switched off alone, mc.eval.rule_ablation.DEFAULT_ARMS), every arm on the same documents, and writes
``<run-dir>/eval/ablation.json`` and ``ablation.md`` (``--out`` picks another JSON path): focused accuracy per
arm and length, and each arm's paired difference from all rules with a 95% interval (``--salience``: the
salience rule's too, swept in every arm), and in each arm that swept both locators LensNet's lead over salience.
``key=value`` overrides apply to every arm (e.g. ``eval.long_range.multiples=[16,32]``). Without ``--draw-seed`` a fresh draw is
made and printed: use a validation draw, never the one a report states.

Exit status: 0 done; 2 bad input (one line ``mc_ablate: error: ...``); 1 a file that cannot be written.
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mc.app.run_lock import RunLock  # noqa: E402
from mc.config import ConfigError  # noqa: E402
from mc.eval.draws import fresh_draw  # noqa: E402
from mc.eval.rule_ablation import DEFAULT_ARMS, ablation_markdown, arm_config, parse_arm, run_rule_ablation  # noqa: E402
from mc.io import describe_os_error, write_json, write_text  # noqa: E402
from mc.train.checkpoint import CheckpointError  # noqa: E402
from scripts.mc_eval import load_eval_config  # noqa: E402  (the run's recorded config plus overrides)

EXIT_WRITE, EXIT_BAD_INPUT = 1, 2


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="mc_ablate.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--run-dir", type=Path, required=True, help="the trained run folder (stage1/ and stage2/)")
    p.add_argument("--draw-seed", type=int, default=None, help="the documents' draw (default: a fresh one)")
    p.add_argument("--arm", action="append", default=None, help="'name:key=value[,key=value]' (repeatable; "
                   "replaces the default arms)")
    p.add_argument("--out", type=Path, default=None, help="JSON path (default <run-dir>/eval/ablation.json)")
    p.add_argument("--salience", action="store_true", help="every arm also sweeps the salience rule (the rules "
                   "shape its search too), paired like focused")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("overrides", nargs="*", help="config overrides key.path=value for every arm")
    args = p.parse_args(argv)
    try:  # every input checked before any sweep: a bad arm fails in a second, not after the first arm's minutes
        arms = dict(parse_arm(a) for a in args.arm) if args.arm else dict(DEFAULT_ARMS)
        overrides = list(args.overrides) + ([f"eval.draw_seed={args.draw_seed}"] if args.draw_seed is not None else [])
        cfg = fresh_draw(load_eval_config(args.run_dir, overrides))
        for ov in arms.values():
            arm_config(cfg, ov)
    except ValueError as exc:  # a malformed --arm, an unknown key or a bad value (ConfigError is a ValueError)
        return _error(str(exc), EXIT_BAD_INPUT)
    print(f"[ablate] documents: eval.draw_seed={cfg.eval.draw_seed}", flush=True)
    out = args.out or args.run_dir / "eval" / "ablation.json"
    try:
        with RunLock(args.run_dir):
            res = run_rule_ablation(cfg, args.run_dir, arms, progress=not args.quiet, salience=args.salience)
            md = ablation_markdown(res)
            write_json(out, res)
            write_text(out.with_suffix(".md"), md + "\n")
    except (ConfigError, CheckpointError) as exc:  # a busy run folder, unreadable weights
        return _error(str(exc), EXIT_BAD_INPUT)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError) and exc.errno is None:  # a stage output missing: names the stage
            return _error(str(exc), EXIT_BAD_INPUT)
        return _error(describe_os_error(exc), EXIT_WRITE)
    print(md)
    print(f"written {out} and {out.with_suffix('.md').name}")
    return 0


def _error(msg: str, code: int) -> int:
    print(f"mc_ablate: error: {msg}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
