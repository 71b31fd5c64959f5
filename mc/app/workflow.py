"""The run10 workflow: environment, data, stage 1, stage 2, evaluation, report, behind a compile gate.

``bash run10.sh [flags] [key=value ...]`` sets up the environment and calls :func:`main`. Flags are
parsed by :func:`mc.config_loading.parse_workflow_args` (shared with the harness); the resolved
config goes to ``<out_dir>/<name>/config.json``, and a folder recorded with another config is refused
(:mod:`mc.app.run_folder`; without ``--name`` the folder is named after the preset and config). Every
bad input stops in :func:`_resolve` with exit 2 before anything is written. A run holds the folder's
lock (:mod:`mc.app.run_lock`) from before its first write to its end, and resolves again under it; an
OS error on a write (disk full, permission denied, read-only) ends the run with one line and exit 1.
A stage whose outputs exist is skipped unless ``--force`` names it; when a training/eval stage runs,
the later selected stages run again too (their outputs would be stale). Stage functions belong to
other modules and are imported lazily.

**The gate.** If any compile mode is on and stage 2 or evaluation will run, the compile harness
must pass on the same resolved config first: it runs in a fresh subprocess
(``scripts/mc_compile_harness.py --json <run>/harness/verdict.json <same args>``), or a recorded
passing verdict is reused when its ``config_hash`` (compile hash), torch version and device all
match. On failure the run stops before any training, names the failed checks and prints the
command that reproduces them.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Sequence

from mc.config import ConfigError, RunConfig, to_dict
from mc.app.run_folder import adopt_stage1, check_recorded_config, check_run_name, check_stage1_source, default_run_name
from mc.app.run_lock import RunFolderBusy, RunLock, held_lock_fds
from mc.app.stage_runners import run_bench_stage, run_data, run_env, run_eval, run_report, run_stage1, run_stage2
from mc.config_loading import WorkflowArgs, compile_hash, config_hash, load_config, parse_workflow_args
from mc.harness.record import INJECT_ENV
from mc.io import clean_stale_tmp, describe_os_error, write_json

STAGES = ("env", "data", "stage1", "stage2", "eval", "bench", "report")
TRAINING = ("stage1", "stage2", "eval", "bench")  # a run of one of these makes every later stage's outputs stale
COMPILED = ("stage2", "eval")  # stages that call the (possibly compiled) LensNet / GistNet
ROOT = Path(__file__).resolve().parents[2]
HARNESS_SCRIPT = ROOT / "scripts" / "mc_compile_harness.py"
EXIT_CONFIG, EXIT_GATE, EXIT_STAGE, EXIT_INTERRUPTED = 2, 3, 1, 130

# Files whose presence means "this stage is done" (relative to the run folder). env always runs.
DONE_FILES = {"env": (), "data": ("data.json",), "stage1": ("stage1/base.pt", "stage1/summary.json"),
              "stage2": ("stage2/summary.json",), "eval": ("eval/eval.json",),
              "bench": ("bench/bench.json",), "report": ("report.md",)}
# Where the workflow writes a stage's returned summary dict.
SUMMARY_FILES = {"env": "env.json", "data": "data.json", "stage1": "stage1/summary.json",
                 "stage2": "stage2/summary.json"}

USAGE = """\
usage: bash run10.sh [--preset NAME] [--mc_compile_lensnet=1] [--mc_compile_lensnet_inference=1]
                     [--mc_compile_gistnet=1] [--compile_mode MODE] [--name NAME]
                     [--stages a,b] [--force a,b] [--nproc N] [--stage1-from DIR] [--dry-run] [--help]
                     [key=value ...]
       (bash mc_run.sh [...] = run10.sh with all three compile flags on)

Stages, in order (outputs under <out_dir>/<name>/; without --name: runs/<preset>/ for a preset's own
config, runs/<preset>-<config hash>/ for anything else, e.g. runs/smoke/, runs/smoke-1a2b3c4d/):
  env      python/torch/device check                        -> env.json (always runs)
  data     corpus fingerprint and train/val split summary   -> data.json
  stage1   base GPT pretraining on tokens (skipped with model=hf) -> stage1/base.pt, stage1/summary.json
  stage2   GistNet + LensNet training (MC)                  -> stage2/ckpt.pt, stage2/summary.json
  eval     held-out evaluation                              -> eval/eval.json
  bench    OPT-IN (--stages=...,bench or bench.enabled=true): eager vs compiled timings (bench.*),
           ~80 s on the smoke preset, ~130 s on cpu             -> bench/bench.json, bench/bench.md
  report   report and plots                                 -> report.md, plots/*.png
A stage whose outputs exist is skipped (re-running resumes); after stage1/stage2/eval runs, the
later selected stages run again. The resolved config is written to config.json first; a folder
whose config.json differs is refused (exit 2, naming the keys) unless --force redoes the stages they feed.

Flags (both --flag=V and --flag V work):
  --preset NAME                    a file of configs/preset/ (what each is for: obsidian Presets): smoke
                                   (minutes on 2 CPU cores), cpu (the default), long (focus to 64x the window),
                                   long_corpus (real-code haystacks, focus to 256x), smollm2, smollm2_cpu
                                   (SmolLM2-135M as the base), h100, h100_smollm2 (GPU)
  --mc_compile_lensnet=1           compile LensNet in training   (compile.lensnet.train)
  --mc_compile_lensnet_inference=1 compile LensNet at inference  (compile.lensnet.inference)
  --mc_compile_gistnet=1           compile GistNet, both contexts (compile.gistnet.*)
  --compile_mode MODE              mode for those flags (default reduce-overhead)
  --name NAME                      run folder name, one folder under out_dir (config key `name`; default:
                                   from preset + config); one run at a time per folder (<run>/.lock)
  --stages a,b                     run only these stages
  --force a,b                      redo these stages even if their outputs exist ("harness" re-runs
                                   the compile harness instead of reusing a recorded verdict; "all")
  --nproc N                         stage1/stage2 under torchrun --standalone --nproc_per_node N (DDP: NCCL,
                                   one GPU per rank; Gloo on CPU); see obsidian "Distributed training"
  --stage1-from DIR                stage 1 is a copy of run folder DIR's (its config must agree on every key that
                                   feeds stage 1): a stage-2 change compared on one base (obsidian Runbook)
  --dry-run                        resolve, check and print the plan; run nothing, write nothing
  key=value                        any config override, passed to Hydra (e.g. train.stage2.steps=50)

Compile gate: with any compile mode on, before stage2/eval the compile harness must pass on this
exact config (scripts/mc_compile_harness.py, in a fresh process; a recorded passing verdict in
harness/verdict.json is reused when config hash, torch version and device match). On failure the
run stops before training and prints the failed checks and the command that reproduces them.

Examples:
  bash run10.sh --preset smoke
  bash run10.sh --preset smoke --mc_compile_lensnet=1 --mc_compile_lensnet_inference=1
  bash run10.sh --preset smoke allocator.inference.iterations=3 --dry-run
  bash run10.sh --preset smoke --name=smoke --stages=eval,report --force=eval eval.n_docs=16  # re-evaluate runs/smoke
Exit codes: 0 done; 1 a stage failed, or a file could not be written (disk full, permission denied,
read-only: one line naming the file and the cause); 2 bad flag/config/run folder (also: the folder is in
use by another run, named by its pid); 3 the compile gate refused; 130 Ctrl-C.
"""


def _say(msg: str) -> None:
    print(f"[run10] {msg}", flush=True)


def _stage_set(value: str | None, flag: str, *, extra: tuple[str, ...] = ()) -> set[str]:
    if value is None:
        return set()
    names = {s.strip() for s in value.split(",") if s.strip()}
    if not names:  # `--stages=` would otherwise fall back to every stage: say so instead
        raise ConfigError(f"flag {flag}={value!r} names no stage; give one or more of "
                          f"{', '.join(STAGES + extra)} (or all), comma-separated")
    if "all" in names:
        return set(STAGES) | set(extra)
    bad = sorted(names - set(STAGES) - set(extra))
    if bad:
        raise ConfigError(f"flag {flag}={value!r} names unknown stage(s) {', '.join(bad)}; "
                          f"stages are {', '.join(STAGES + extra)} (or all)")
    return names


# name -> fn(cfg, run_dir) -> summary dict. Tests replace entries to avoid real training.
STAGE_RUNNERS: dict[str, Callable[[RunConfig, Path], Any]] = {
    "env": run_env, "data": run_data, "stage1": run_stage1, "stage2": run_stage2, "eval": run_eval,
    "bench": run_bench_stage, "report": run_report}


def stage_done(stage: str, run_dir: Path) -> bool:
    files = DONE_FILES[stage]
    return bool(files) and all((run_dir / f).exists() for f in files)


def plan_stages(selected: Sequence[str], force: set[str], run_dir: Path) -> dict[str, str]:
    """``{stage: "run" | "skip (outputs exist)"}`` for the selected stages, in order."""
    plan, stale = {}, False
    for stage in STAGES:
        if stage not in selected:
            continue
        run = stage in force or stale or not stage_done(stage, run_dir)
        plan[stage] = "run" if run else "skip (outputs exist)"
        if run and stage in TRAINING:
            stale = True
    return plan


# ============================================================================ the gate
def harness_argv(args: WorkflowArgs) -> list[str]:
    """The workflow's config-relevant arguments, as the harness CLI takes them (same resolution)."""
    out = []
    if args.preset:
        out.append(f"--preset={args.preset}")
    if args.name:
        out.append(f"--name={args.name}")
    if args.compile_mode != "reduce-overhead":
        out.append(f"--compile_mode={args.compile_mode}")
    out += [f"--{flag}={int(on)}" for flag, on in args.compile_flags.items()]
    return out + list(args.overrides)


def harness_command(args: WorkflowArgs, verdict_path: Path) -> list[str]:
    return [sys.executable, str(HARNESS_SCRIPT), "--json", str(verdict_path), *harness_argv(args)]


def run_harness_subprocess(cmd: list[str]) -> int:
    """Run the harness in a fresh process (Dynamo / CUDA-graph state is global); output streams through.
    It inherits the run folder's lock descriptor (mc.app.run_lock), so a killed workflow's folder stays locked
    until its harness ends too."""
    return subprocess.run(cmd, check=False, pass_fds=held_lock_fds()).returncode


def _expected_identity(cfg: RunConfig) -> dict:
    import torch  # noqa: PLC0415

    from mc.build import resolve_device  # noqa: PLC0415
    from mc.harness.probes import device_label  # noqa: PLC0415

    return {"config_hash": compile_hash(cfg), "torch_version": torch.__version__,
            "device": device_label(resolve_device(cfg.train.device))}


def _read_verdict(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def gate(cfg: RunConfig, args: WorkflowArgs, run_dir: Path, *, rerun: bool = False) -> tuple[bool, str]:
    """Return ``(ok, message)``: a passing verdict for exactly this config, torch and device, or why not."""
    path = run_dir / "harness" / "verdict.json"
    want = _expected_identity(cfg)
    cmd = harness_command(args, path)
    inject = os.environ.get(INJECT_ENV)  # inherited by the harness process: part of what it ran
    env = f"{INJECT_ENV}={shlex.quote(inject)} " if inject else ""
    repro = f"cd {shlex.quote(str(Path.cwd()))} && {env}{shlex.join(cmd)}"
    old = _read_verdict(path) if path.exists() and not rerun else None
    if old is not None:
        diff = [k for k, v in want.items() if old.get(k) != v]
        if old.get("passed") is True and not diff:
            return True, (f"gate: reusing the passing verdict {path} (config hash {want['config_hash']}, "
                          f"torch {want['torch_version']}, device {want['device']})")
        why = (f"{', '.join(f'{k} {old.get(k)!r} -> {want[k]!r}' for k in diff)} changed" if diff
               else "the recorded verdict failed")
        _say(f"gate: re-running the harness ({why})")
    else:
        _say("gate: running the compile harness on this config " + ("(--force=harness)" if rerun else "(no recorded verdict)"))
    _say(f"gate: {shlex.join(cmd)}")
    if path.exists():
        path.unlink()  # a stale verdict must never be read back as this run's result
    rc = run_harness_subprocess(cmd)
    verdict = _read_verdict(path)
    if verdict is None:
        return False, (f"the compile harness wrote no verdict (exit code {rc}); compile stays off and training did "
                       f"not start.\n  reproduce: {repro}")
    diff = [k for k, v in want.items() if verdict.get(k) != v]
    if diff:
        return False, (f"the harness verdict does not describe this run ({', '.join(diff)} differ: "
                       f"{ {k: verdict.get(k) for k in diff} } vs {want}); training did not start.\n  reproduce: {repro}")
    if not verdict.get("passed"):
        failed = {n: c for n, c in verdict.get("checks", {}).items() if not c.get("passed")}
        lines = "\n".join(f"    - {n} (value {c.get('value')!r}): {str(c.get('detail'))[:500]}" for n, c in failed.items())
        return False, (f"the compile harness FAILED check(s): {', '.join(failed) or '(none named)'}; compile stays "
                       f"off and training did not start.\n{lines}\n  verdict: {path}\n  reproduce: {repro}\n"
                       "  (see obsidian/Runbook.md: reading a failed verdict)")
    if rc != 0:
        return False, f"the harness exited with {rc} although its verdict passed; not trusting it.\n  reproduce: {repro}"
    return True, f"gate: the compile harness passed ({path})"


# ============================================================================ main
def _resolve(argv: Sequence[str]) -> tuple[WorkflowArgs, RunConfig, dict[str, str], set[str], list[str]]:
    """Flags -> config, run folder and plan; every bad input raises ConfigError here (exit 2, nothing written)."""
    from mc.build import resolve_device  # noqa: PLC0415 - torch only once the flags parsed
    from mc.train.tb_log import require_tensorboard  # noqa: PLC0415

    args = parse_workflow_args(argv)
    cfg = load_config(args.hydra_overrides())
    resolve_device(cfg.train.device)  # train.device=cuda without a GPU stops at start-up, not inside a stage
    require_tensorboard(cfg)  # train.tensorboard=true without the package: exit 2 now, not in stage 1
    if cfg.model.source == "hf":  # a model the adapter would get wrong: exit 2 now, before anything is written
        from mc.nets.hf_load import preflight_hf_base  # noqa: PLC0415 - transformers only for model=hf
        preflight_hf_base(cfg.model)
    if args.name is None and not any(o.split("=", 1)[0].lstrip("+~") == "name" for o in args.overrides):
        cfg.name = default_run_name(cfg, lambda preset: load_config([f"preset={preset}"]))
    check_run_name(cfg.name)  # one folder under out_dir: `--name ../x` must not escape runs/
    selected = _stage_set(args.stages, "--stages") or {s for s in STAGES if s != "bench" or cfg.bench.enabled}
    force = _stage_set(args.force, "--force", extra=("harness",))
    covered = force & selected
    if cfg.model.source == "hf":  # the loaded model is the base: nothing to pretrain (obsidian Base models)
        selected.discard("stage1")  # so model.* keys feed stage 2: forcing stage1 or stage2 redoes from there
        force = (force - {"stage1"}) | ({"stage2"} if "stage1" in force else set())
        covered = (force & selected) | ({"stage1"} if force & selected & {"data", "stage2"} else set())
    if args.nproc > 1:  # the global batch must split evenly over the ranks: say so before anything runs
        from mc.train.distributed import local_config  # noqa: PLC0415
        local_config(cfg, args.nproc)
    run_dir = Path(cfg.out_dir) / cfg.name
    if args.stage1_from is not None:
        check_stage1_source(cfg, Path(args.stage1_from))
    diff = check_recorded_config(cfg, run_dir, covered, STAGES)
    return args, cfg, plan_stages([s for s in STAGES if s in selected], force, run_dir), force, diff


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        print(USAGE)
        return 0
    dry_run = "--dry-run" in argv
    argv = [a for a in argv if a != "--dry-run"]
    try:
        args, cfg, plan, force, diff = _resolve(argv)
    except ConfigError as exc:
        print(f"run10: error: {exc}\n(run `bash run10.sh --help` for the flags)", file=sys.stderr)
        return EXIT_CONFIG
    run_dir = Path(cfg.out_dir) / cfg.name
    _say(f"resolved overrides: {' '.join(args.hydra_overrides()) or '(none)'}")
    _say(f"run folder: {run_dir} (config hash {config_hash(cfg)}, compile hash {compile_hash(cfg)})")
    if diff:
        _say(f"the recorded config.json differs in {', '.join(diff)}: the forced stages redo what those keys feed")
    modes = {f"{n}.{c}": getattr(getattr(cfg.compile, n), c) for n in ("lensnet", "gistnet") for c in ("train", "inference")}
    _say(f"compile modes: {modes}")
    if cfg.model.source == "hf":
        _say(f"model=hf: base {cfg.model.hf_path} (d_model {cfg.model.d_model}, {cfg.model.n_layers} layers); stage1 skipped")
    needs_gate = cfg.compile.any_on and any(plan.get(s) == "run" for s in COMPILED)
    _say("plan: " + ", ".join(f"{s}={p}" for s, p in plan.items())
         + ("; compile gate before stage2/eval (before any training)" if needs_gate else "")
         + (f"; stage1/stage2 under torchrun on {args.nproc} ranks (the rest in this process)" if args.nproc else "")
         + (f"; stage1 is a copy of {args.stage1_from}'s" if args.stage1_from is not None else ""))
    if dry_run:
        _say("dry run: nothing executed, nothing written")
        return 0
    try:
        with RunLock(run_dir) as lock:
            if lock.previous_pid is not None:
                _say(f"took over the run folder's lock from pid {lock.previous_pid}, which ended without releasing it "
                     "(killed?)")
            # Under the lock, resolve again: a run that held the folder may have recorded its config.json
            # or finished stages since the first look, and the check and the plan must see that.
            args, cfg, again, force, diff = _resolve(argv)
            if again != plan:
                _say("plan under the lock: " + ", ".join(f"{s}={p}" for s, p in again.items()))
            return _run_stages(args, cfg, again, force, run_dir)
    except RunFolderBusy as exc:
        print(f"run10: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except ConfigError as exc:  # the folder changed under the second look (config.json of another config)
        print(f"run10: error: {exc}\n(run `bash run10.sh --help` for the flags)", file=sys.stderr)
        return EXIT_CONFIG
    except OSError as exc:  # a full disk, a read-only or immutable run folder: one line, the path and the cause
        print(f"run10: error: {describe_os_error(exc)}", file=sys.stderr)
        return EXIT_STAGE


def _run_stages(args: WorkflowArgs, cfg: RunConfig, plan: dict[str, str], force: set[str], run_dir: Path) -> int:
    """Run the plan (the caller holds the run folder's lock); OS errors outside a stage propagate."""
    needs_gate = cfg.compile.any_on and any(plan.get(s) == "run" for s in COMPILED)
    stage = "set-up"
    try:
        # Only this process writes below run_dir (it holds the lock): a *.tmp there is a write a killed run left.
        for p in clean_stale_tmp(run_dir, recursive=True):
            _say(f"removed {p} (a write a killed run left unfinished)")
        write_json(run_dir / "config.json", to_dict(cfg))
        gated = False
        from mc.train.launch import gate_inputs, workflow_runners  # noqa: PLC0415
        runners = {**STAGE_RUNNERS, **workflow_runners(args.nproc)}  # --nproc: stage 1/2 under torchrun
        if args.stage1_from is not None:
            runners["stage1"] = lambda cfg, run_dir: adopt_stage1(Path(args.stage1_from), run_dir)
        for stage, what in plan.items():
            if needs_gate and not gated and stage in TRAINING and what == "run":
                ok, msg = gate(*gate_inputs(cfg, args), run_dir, rerun="harness" in force)
                if not ok:
                    print(f"run10: error: {msg}", file=sys.stderr)
                    return EXIT_GATE
                _say(msg)
                gated = True
            if what != "run":
                _say(f"{stage}: skipped, outputs exist ({', '.join(DONE_FILES[stage])}); --force={stage} redoes it")
                continue
            _say(f"{stage}: running")
            t0 = time.perf_counter()
            try:
                result = runners[stage](cfg, run_dir)
            except Exception as exc:  # noqa: BLE001 - report which stage failed, then stop
                _report_stage_error(stage, exc)
                return EXIT_STAGE
            if stage in SUMMARY_FILES:
                write_json(run_dir / SUMMARY_FILES[stage], result if isinstance(result, dict) else {"result": result})
            _say(f"{stage}: done in {time.perf_counter() - t0:.1f} s")
    except KeyboardInterrupt:
        print(f"\nrun10: interrupted (Ctrl-C) during {stage}; finished stages are kept. Re-run the same command to "
              "go on: done stages are skipped and training resumes from its last checkpoint.", file=sys.stderr)
        return EXIT_INTERRUPTED
    _say(f"finished; run folder {run_dir}" + (f", report {run_dir / 'report.md'}" if "report" in plan else ""))
    return 0


def _report_stage_error(stage: str, exc: Exception) -> None:
    """A user-facing error (bad config, unreadable checkpoint) in one line; anything else with its traceback."""
    from mc.train.checkpoint import CheckpointError, TrainingDiverged  # noqa: PLC0415
    from mc.train.launch import DistributedRunError  # noqa: PLC0415 - the ranks printed their own errors

    if isinstance(exc, (ConfigError, CheckpointError, DistributedRunError, TrainingDiverged)):
        print(f"run10: error: stage {stage}: {exc}", file=sys.stderr)
        return
    if isinstance(exc, OSError):  # disk full, permission denied, a missing input: the path and the cause
        print(f"run10: error: stage {stage}: {describe_os_error(exc)}", file=sys.stderr)
        return
    traceback.print_exc()
    print(f"run10: error: stage {stage} failed (above). Fix it and re-run: finished stages are skipped and "
          "training resumes from its last checkpoint.", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
