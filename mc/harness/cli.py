"""The compile harness's command line: ``python scripts/mc_compile_harness.py [flags] [key=value ...]``.

Owns the flag parsing (the harness's own flags; the rest are run10 flags and Hydra overrides,
resolved exactly as the workflow resolves them), the "nothing compiled: test what mc_run.sh turns
on" rule, and :func:`main`: run :func:`mc.harness.run.run_harness`, print the table, write the
verdict JSON. Exit 0 iff every check passes, 1 when a check fails (or the verdict JSON cannot be
written: one ``error:`` line naming the file), 2 for a bad flag or config value (a ``--base-weights``
file that is missing, unreadable or holds NaN/inf included). See obsidian "Runbook" (compile harness).
"""
from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Any, Sequence

from mc.config import ConfigError, RunConfig, to_dict
from mc.config_loading import COMPILE_FLAGS, load_config, parse_workflow_args
from mc.harness.record import INJECT_ENV, INJECTIONS
from mc.harness.run import compile_modes, run_harness
from mc.harness.verdict import format_table
from mc.io import WriteError, write_json

USAGE = """\
usage: python scripts/mc_compile_harness.py [--json PATH] [--strict] [--base-weights PATH]
                                            [--compile-budget SECONDS] [--inject recompile|alias|hook]
                                            [run10 flags] [key=value ...]

Proves that the resolved config is safe to run compiled: builds the real controller, warms it
up, then trains (>= 2 accumulated micro-steps + an optimizer step), runs an inference session
with refocuses and GistNet tree appends, and checks: no exception, 0 recompiles after warm-up,
0 graph breaks, CUDA graphs recorded in warm-up only (n/a on CPU), held outputs unchanged and
never aliased, eager parity of scores and gradients, finite values, flat CUDA memory, compile
time. Prints a table; exit 0 iff every check passes.

Which nets are compiled: the run10 flags (--mc_compile_lensnet=1, --mc_compile_lensnet_inference=1,
--mc_compile_gistnet=1, --compile_mode MODE) or compile.* overrides, as in the workflow. With no
compile flag and a config that compiles nothing, the harness turns on what mc_run.sh turns on:
reduce-overhead for LensNet train + inference and GistNet.

  --json PATH            write the verdict JSON there
  --strict               CUDA: triton.cudagraph_or_error + no graph partition (a skip raises)
  --base-weights PATH    stage-1 weights for the base model (default: fresh weights)
  --compile-budget S     fail the compile_time check above S seconds (default: report only)
  --inject KIND          test hook proving the harness can fail: "recompile" (a call at an unwarmed
                         shape after warm-up), "alias" (LensNet's helper skips its clone) or
                         "hook" (a LensNet forward hook reading a flag flipped after warm-up:
                         the verdict names the flag's guard); also env MC_HARNESS_INJECT
examples:
  python scripts/mc_compile_harness.py --json v.json
  python scripts/mc_compile_harness.py --preset smoke --mc_compile_lensnet_inference=1
  TORCH_LOGS=recompiles python scripts/mc_compile_harness.py compile.freeze=warn
"""

_HARNESS_VALUE_FLAGS = {"--json": "json", "--base-weights": "base_weights", "--compile-budget": "compile_budget",
                        "--inject": "inject"}


def split_harness_argv(argv: Sequence[str]) -> tuple[dict, list[str]]:
    """Take the harness's own flags out of ``argv``; the rest is for ``parse_workflow_args``."""
    opts: dict[str, Any] = {"strict": False, "help": False}
    rest: list[str] = []
    items, i = list(argv), 0
    while i < len(items):
        item = items[i]
        i += 1
        name, eq, value = item.partition("=")
        if item in ("-h", "--help"):
            opts["help"] = True
        elif item == "--strict":
            opts["strict"] = True
        elif name in _HARNESS_VALUE_FLAGS:
            if not eq:
                if i >= len(items):
                    raise ConfigError(f"flag {name} needs a value ({name}=VALUE or {name} VALUE)")
                value, i = items[i], i + 1
            opts[_HARNESS_VALUE_FLAGS[name]] = value
        else:
            rest.append(item)
    if opts.get("inject") not in (None, *INJECTIONS):
        raise ConfigError(f"flag --inject={opts['inject']!r} is invalid: expected one of {', '.join(INJECTIONS)}")
    if "compile_budget" in opts:
        try:
            opts["compile_budget"] = float(opts["compile_budget"])
        except ValueError:
            raise ConfigError(f"flag --compile-budget={opts['compile_budget']!r} is invalid: expected seconds") from None
    return opts, rest


def resolve_harness_config(argv: Sequence[str]) -> tuple[RunConfig, list[str], bool]:
    """Resolve like the workflow; with no compile requested anywhere, force mc_run.sh's compile flags.

    Returns ``(cfg, hydra_overrides, forced)``.
    """
    args = parse_workflow_args(argv)
    overrides = args.hydra_overrides()
    cfg = load_config(overrides)
    forced = False
    if not args.any_compile and not cfg.compile.any_on:
        args.compile_flags = {flag: True for flag in COMPILE_FLAGS}
        overrides = args.hydra_overrides()
        cfg = load_config(overrides)
        forced = True
    return cfg, overrides, forced


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI: 0 iff every check passes, 1 when one fails, 2 for a bad flag or config value."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        opts, rest = split_harness_argv(argv)
        if opts["help"]:
            print(USAGE)
            return 0
        cfg, overrides, forced = resolve_harness_config(rest)
        inject = opts.get("inject") or os.environ.get(INJECT_ENV) or None
        if inject not in (None, *INJECTIONS):
            raise ConfigError(f"{INJECT_ENV}={inject!r} is invalid: expected one of {', '.join(INJECTIONS)}")
        from mc.build import resolve_device  # noqa: PLC0415

        resolve_device(cfg.train.device)  # train.device=cuda without a GPU: a clear error, not a traceback
        if opts.get("base_weights"):
            check_base_weights(opts["base_weights"])
    except (ConfigError, RuntimeError) as exc:  # CheckpointError is a RuntimeError
        print(f"mc_compile_harness: error: {exc}", file=sys.stderr)
        return 2
    if forced:
        print("[harness] no compile requested: testing what mc_run.sh turns on "
              "(reduce-overhead for lensnet train+inference and gistnet)")
    print(f"[harness] overrides: {' '.join(overrides) or '(none)'}")
    print(f"[harness] compile modes: {compile_modes(cfg)}")
    verdict = run_harness(cfg, strict=opts["strict"], base_weights=opts.get("base_weights"), inject=inject,
                          compile_budget_s=opts.get("compile_budget", 0.0))
    verdict["info"].update(overrides=overrides, forced_compile=forced, config=to_dict(cfg),
                           command="python scripts/mc_compile_harness.py " + shlex.join(argv))
    print(format_table(verdict))
    if opts.get("json"):
        try:
            write_json(opts["json"], verdict)
        except WriteError as exc:  # the table above stands; the verdict file does not exist
            print(f"mc_compile_harness: error: {exc}", file=sys.stderr)
            return 1
        print(f"[harness] verdict written to {opts['json']}")
    return 0 if verdict["passed"] else 1


def check_base_weights(path: str) -> None:
    """``--base-weights`` must name a readable checkpoint of finite weights: a bad flag (exit 2) is found here,
    not reported as a failed ``no_exception`` check after minutes of warm-up."""
    from mc.train.checkpoint import check_finite, load_checkpoint  # noqa: PLC0415 - torch only past the flags

    p = Path(path)
    if p.is_dir() or not p.exists():
        raise ConfigError(f"flag --base-weights={path!r} is invalid: "
                          f"{'it is a directory' if p.is_dir() else 'no such file'}; pass stage 1's "
                          "runs/<name>/stage1/base.pt (or leave the flag out for fresh weights)")
    state = load_checkpoint(p)
    check_finite(state.get("model", state), p, fix="pass another run's stage1/base.pt, or re-run stage 1")
