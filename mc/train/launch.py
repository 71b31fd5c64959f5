"""Launching a training stage under torchrun, and the entry point each rank runs.

Workflow side, :func:`run_distributed`: writes ``<run>/<stage>/launch.json`` (the resolved config
and the loop's keyword arguments) and runs
``python -m torch.distributed.run --standalone --nproc_per_node N --max_restarts 0 -m mc.train.launch
STAGE <launch.json>`` (torchrun on the loopback interface, no restarts: a failed rank fails the
stage, and the re-run resumes from the last checkpoint). It returns rank 0's summary, or raises
:class:`DistributedRunError` naming the exit code and the last checkpoint.

Rank side, :func:`main`: joins the process group (:func:`mc.train.distributed.session`), runs
``train_stage1`` / ``train_stage2``; rank 0 writes ``<run>/<stage>/dist_summary.json``. Any
failure prints one line naming the rank and, when a peer died, which one. See obsidian
"Distributed training".
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from mc.config import RunConfig, from_dict, to_dict
from mc.config_checks import validate
from mc.io import write_json

STAGES = ("stage1", "stage2")
LAUNCH_FILE, SUMMARY_FILE = "launch.json", "dist_summary.json"


class DistributedRunError(RuntimeError):
    """A torchrun launch of a training stage failed (a rank raised, died or timed out)."""


def dies_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child receive SIGTERM when this process dies (Linux ``PR_SET_PDEATHSIG``),
    or None where that does not exist. A workflow killed with SIGKILL cannot stop torchrun itself; torchrun stops
    its ranks on SIGTERM, so without this the ranks would train on, orphaned, holding the run folder's lock."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # noqa: PLC0415
    import signal  # noqa: PLC0415

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here, in the parent: the child only calls it
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig, sigterm = 1, int(signal.SIGTERM)
    return lambda: prctl(pr_set_pdeathsig, sigterm)


def torchrun_command(stage: str, launch_file: str | os.PathLike, nproc: int) -> list[str]:
    """``torchrun --standalone --nproc_per_node N`` (as ``python -m torch.distributed.run``, so the
    same interpreter and environment run every rank) around this module's :func:`main`."""
    if stage not in STAGES:
        raise ValueError(f"stage {stage!r} cannot run under torchrun: expected one of {', '.join(STAGES)}")
    if not isinstance(nproc, int) or nproc < 1:
        raise ValueError(f"nproc={nproc!r} is invalid: expected a positive integer")
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
            "--max_restarts=0", "-m", "mc.train.launch", stage, str(launch_file)]


def write_launch_file(stage: str, cfg: RunConfig, run_dir: str | os.PathLike, **loop_kwargs: Any) -> Path:
    """``<run>/<stage>/launch.json``: what every rank reads (no Hydra needed on the ranks)."""
    return write_json(Path(run_dir) / stage / LAUNCH_FILE, {"config": to_dict(cfg), "run_dir": str(run_dir),
                                                            "loop": loop_kwargs})


def _last_checkpoint(run_dir: Path, stage: str) -> str:
    path = run_dir / stage / "ckpt.pt"
    if not path.exists():
        return "no checkpoint yet (the stage starts over)"
    from mc.train.checkpoint import load_checkpoint  # noqa: PLC0415

    try:
        return f"last checkpoint {path} (step {load_checkpoint(path).get('step')})"
    except Exception as e:  # noqa: BLE001 - only a hint in an error message; say what went wrong
        return f"last checkpoint {path} is unreadable ({type(e).__name__}: {e})"


def run_distributed(stage: str, cfg: RunConfig, run_dir: str | os.PathLike, nproc: int, *,
                    run: Callable[[list[str]], int] | None = None, **loop_kwargs: Any) -> dict[str, Any]:
    """Run ``stage`` on ``nproc`` ranks and return rank 0's summary; DistributedRunError on failure."""
    run_dir = Path(run_dir)
    launch = write_launch_file(stage, cfg, run_dir, **loop_kwargs)
    summary_path = run_dir / stage / SUMMARY_FILE
    if summary_path.exists():
        summary_path.unlink()  # a stale summary must never stand for this launch's result
    cmd = torchrun_command(stage, launch, nproc)
    print(f"[run10] {stage}: torchrun --standalone --nproc_per_node {nproc} ({' '.join(cmd)})", flush=True)
    from mc.app.run_lock import held_lock_fds  # noqa: PLC0415 - torchrun keeps the workflow's run-folder lock
    rc = (run or (lambda c: subprocess.run(c, check=False, pass_fds=held_lock_fds(),
                                           preexec_fn=dies_with_parent()).returncode))(cmd)
    if rc != 0:
        raise DistributedRunError(
            f"{stage} failed on {nproc} ranks (torchrun exit code {rc}); the [mc rank ...] lines above name the "
            f"failed or dead rank. {_last_checkpoint(run_dir, stage)}: re-run the same command (--nproc {nproc}) "
            "to resume from it")
    if not summary_path.exists():
        raise DistributedRunError(f"{stage}: torchrun exited 0 but rank 0 wrote no {summary_path}")
    return json.loads(summary_path.read_text())


def workflow_runners(nproc: int) -> dict[str, Callable[[RunConfig, Path], dict[str, Any]]]:
    """The workflow's stage-1/2 runners under ``--nproc N`` (empty without it: nothing changes)."""
    if nproc < 1:
        return {}
    return {stage: (lambda cfg, run_dir, stage=stage: run_distributed(stage, cfg, run_dir, nproc)) for stage in STAGES}


def gate_inputs(cfg: RunConfig, args: Any) -> tuple[RunConfig, Any]:
    """The config and workflow args the compile gate checks: under ``--nproc`` the per-rank batch
    (the shapes each rank compiles and runs), else ``cfg`` and ``args`` themselves."""
    if args.nproc < 1:
        return cfg, args
    from mc.train.distributed import local_config, local_overrides  # noqa: PLC0415

    return local_config(cfg, args.nproc), dataclasses.replace(args, overrides=[*args.overrides,
                                                                                *local_overrides(cfg, args.nproc)])


def _train(stage: str) -> Callable[..., dict[str, Any]]:
    if stage == "stage1":
        from mc.train.stage1 import train_stage1  # noqa: PLC0415
        return train_stage1
    from mc.train.stage2 import train_stage2  # noqa: PLC0415
    return train_stage2


def _rank_main(argv: Sequence[str]) -> int:
    import mc.train.distributed as distributed  # noqa: PLC0415

    if len(argv) != 2 or argv[0] not in STAGES:
        print(f"usage: torchrun ... -m mc.train.launch {{{','.join(STAGES)}}} LAUNCH_JSON (got {list(argv)})",
              file=sys.stderr)
        return 2
    stage, launch = argv[0], Path(argv[1])
    spec = json.loads(launch.read_text())
    cfg = validate(from_dict(RunConfig, spec["config"]))
    run_dir = Path(spec["run_dir"])
    with distributed.session(cfg) as dist:
        try:
            progress = dist.is_main and os.environ.get("MC_PROGRESS", "1") != "0"
            summary = _train(stage)(cfg, run_dir, progress=progress, **spec.get("loop", {}))
        except BaseException as e:
            if not isinstance(e, SystemExit):
                print(f"{dist.label()} failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
                print(dist.diagnose(), file=sys.stderr, flush=True)
            raise
        if dist.is_main:
            write_json(run_dir / stage / SUMMARY_FILE, summary)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Rank entry point (torchrun runs ``-m mc.train.launch STAGE LAUNCH_JSON`` on every rank)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:  # torchrun's error file: the launcher's failure summary then shows this rank's exception
        from torch.distributed.elastic.multiprocessing.errors import record  # noqa: PLC0415
    except ImportError:  # pragma: no cover - every torch with torchrun has it
        return _rank_main(argv)
    return record(_rank_main)(argv)


if __name__ == "__main__":
    code = main()
    # A rank that finished (summary written, barriers passed, process group destroyed) leaves without
    # interpreter finalisation. In one full test-suite run a 2-rank CPU job lost a rank *after* its last step,
    # at exit, with no Python frame on the stack ("terminate called without an active exception": a native
    # thread still joinable while C++ statics were torn down), and torchrun then failed the whole job. Nothing
    # is left to clean up here that the OS does not; failures still leave through the exception path above.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
