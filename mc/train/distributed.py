"""Distributed training plumbing (torchrun + DistributedDataParallel) for the stage-1/2 loops.

Owns the process group's life (:func:`session`: NCCL on CUDA with one device per rank, Gloo on
CPU, the collective timeout ``train.dist_timeout_s``, a peer watchdog, teardown) and :class:`Dist`,
the handful of calls the loops make: per-rank batch and config (:func:`per_rank_batch`), data seed
and shard, the DDP wrappers, ``no_sync`` for accumulation micro-steps, metric reduction, rank-0-only
metrics and checkpoints (with every rank's RNG state), and the dead-rank diagnosis. Outside a
session :func:`current` returns a single-process ``Dist`` whose calls are identities, so a run
without ``--nproc`` trains exactly as before. See obsidian "Distributed training".
"""
from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import signal
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
import torch.distributed as tdist
from torch import nn

from mc.config import ConfigError, RunConfig, StageConfig
from mc.train.checkpoint import restore_rng, save_checkpoint
from mc.train.common import MetricsLog

RANK_SEED_STRIDE = 1_000_003  # rank r's data generator: seed + r * stride (rank 0 = the single-process seed)
EXIT_PEER_DIED = 75  # a rank leaves with this code when the watchdog finds a dead peer
WATCHDOG_INTERVAL_S = 0.5


# ----------------------------------------------------------------------------- batch arithmetic
def per_rank_batch(batch_size: int, grad_accum: int, world: int, *, key: str = "train") -> tuple[int, int]:
    """``(micro_batch, grad_accum)`` per rank so that ``world * micro * accum == batch_size * grad_accum``.

    The micro-batch is the largest divisor of the rank's share that is <= ``batch_size`` (memory per
    device never grows); e.g. 8 x 4 on 2 ranks -> 8 x 2, 2 x 1 on 2 ranks -> 1 x 1, 6 x 2 on 4 -> 3 x 1.
    """
    total = batch_size * grad_accum
    if world < 1 or total % world:
        raise ConfigError(f"{key}: the global batch batch_size*grad_accum = {batch_size}*{grad_accum} = {total} "
                          f"sequences cannot be split evenly over {world} ranks; make it a multiple of --nproc {world}")
    share = total // world
    micro = max(d for d in range(1, min(batch_size, share) + 1) if share % d == 0)
    return micro, share // micro


def local_config(cfg: RunConfig, world: int) -> RunConfig:
    """``cfg`` with each stage's batch_size / grad_accum replaced by the per-rank values."""
    if world == 1:
        return cfg
    stages = {}
    for name in ("stage1", "stage2"):
        st: StageConfig = getattr(cfg.train, name)
        micro, accum = per_rank_batch(st.batch_size, st.grad_accum, world, key=f"train.{name}")
        stages[name] = dataclasses.replace(st, batch_size=micro, grad_accum=accum)
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, **stages))


def local_overrides(cfg: RunConfig, world: int) -> list[str]:
    """The per-rank batch as Hydra overrides (the compile gate checks the shapes each rank runs)."""
    local = local_config(cfg, world)
    return [f"train.{s}.{k}={getattr(getattr(local.train, s), k)}" for s in ("stage1", "stage2")
            for k in ("batch_size", "grad_accum")]


# ----------------------------------------------------------------------------- peers
def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, dead but not yet reaped by torchrun, counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False
    except OSError:  # no /proc (not Linux): fall back to a signal-0 probe
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


class _AuxNets(nn.Module):
    """Stage 2's trainable nets under one module, so one DDP instance (one reducer) covers them.

    ``forward(fn)`` runs the controller's micro-step: DDP arms its gradient all-reduce around it,
    while the nets themselves stay the plain modules the compiled boundary wraps.
    """

    def __init__(self, nets: dict[str, nn.Module]):
        super().__init__()
        self.nets = nn.ModuleDict(nets)

    def forward(self, fn: Callable[[], Any]) -> Any:
        return fn()


class _NullLog:
    """The metrics log of ranks > 0: rank 0 alone writes (the means over all ranks)."""

    def write(self, record: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


class _RankLog(MetricsLog):
    """Rank 0's metrics: every record says how many ranks trained it."""

    def __init__(self, path: Path, *, resume_step: int | None, world: int, tensorboard_dir: Path | None = None):
        super().__init__(path, resume_step=resume_step, tensorboard_dir=tensorboard_dir)
        self.world = world

    def write(self, record: dict[str, Any]) -> None:
        super().write({**record, "world_size": self.world})


@dataclasses.dataclass
class Dist:
    """This process's place in the run; every method is an identity in a single process."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    enabled: bool = False  # a torchrun process group is up
    backend: str = ""
    pids: list[int] = dataclasses.field(default_factory=list)  # pid of every rank (same host: --standalone)
    save_lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def label(self) -> str:
        return f"[mc rank {self.rank}/{self.world}]"

    # -- set-up
    def tags(self) -> dict[str, int]:
        """Added to every telemetry event under torchrun (empty in a single process)."""
        return {"rank": self.rank, "world_size": self.world} if self.enabled else {}

    def place(self, device: torch.device) -> torch.device:
        """One device per rank: ``cuda`` -> ``cuda:LOCAL_RANK``."""
        return torch.device("cuda", self.local_rank) if self.enabled and device.type == "cuda" else device

    def local(self, cfg: RunConfig) -> RunConfig:
        return local_config(cfg, self.world)

    def data_seed(self, seed: int) -> int:
        return seed + self.rank * RANK_SEED_STRIDE

    def shard(self, sampler: Any) -> Any:
        return sampler.shard(self.rank, self.world) if self.world > 1 else sampler

    # -- DDP
    def _ddp(self, module: nn.Module) -> nn.Module:
        ids = [self.local_rank] if self.backend == "nccl" else None
        # Buffers (rotary tables) are constants: no per-forward broadcast (the flag's newer name first).
        params = inspect.signature(nn.parallel.DistributedDataParallel.__init__).parameters
        no_sync_buffers = {"forward_sync_buffers" if "forward_sync_buffers" in params else "broadcast_buffers": False}
        return nn.parallel.DistributedDataParallel(module, device_ids=ids, **no_sync_buffers)

    def wrap(self, model: nn.Module) -> nn.Module:
        """Stage 1: the model under DDP (its own forward)."""
        return self._ddp(model) if self.enabled else model

    def wrap_aux(self, nets: dict[str, nn.Module]) -> nn.Module | None:
        """Stage 2: DDP over the trainable nets only (the frozen base stays outside)."""
        return self._ddp(_AuxNets(nets)) if self.enabled else None

    def micro_step(self, ddp: nn.Module | None, last: bool) -> contextlib.AbstractContextManager:
        """``no_sync`` on every accumulation micro-step but the last: one all-reduce per optimizer step."""
        if self.enabled and ddp is not None and not last:
            return ddp.no_sync()
        return contextlib.nullcontext()

    def forward(self, ddp: nn.Module | None, fn: Callable[[], Any]) -> Any:
        return fn() if ddp is None else ddp(fn)

    # -- metrics
    def mean(self, values: dict[str, float], device: torch.device) -> dict[str, float]:
        """Average each value over the ranks (one all-reduce); identity in a single process."""
        if not self.enabled:
            return values
        keys = list(values)
        t = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=device)
        tdist.all_reduce(t)
        return dict(zip(keys, (t / self.world).tolist()))

    def metrics_log(self, path: Path, *, resume_step: int | None,
                    tensorboard_dir: Path | None = None) -> MetricsLog | _NullLog:
        if not self.enabled:
            return MetricsLog(path, resume_step=resume_step, tensorboard_dir=tensorboard_dir)
        if not self.is_main:
            return _NullLog()
        return _RankLog(path, resume_step=resume_step, world=self.world, tensorboard_dir=tensorboard_dir)

    def gather(self, obj: Any) -> list[Any]:
        if not self.enabled:
            return [obj]
        out: list[Any] = [None] * self.world
        tdist.all_gather_object(out, obj)
        return out

    # -- checkpoints
    def save(self, path: Path, state: dict[str, Any]) -> None:
        """Rank 0 writes (atomically); ``state["rng"]`` is replaced by every rank's RNG state."""
        if self.enabled:
            ranks = self.gather(state["rng"])  # collective: every rank calls save at the same step
            state = {**state, "rng": ranks[0], "rng_ranks": ranks, "world_size": self.world}
        if self.is_main:
            with self.save_lock:  # the watchdog lets a started write finish before it exits
                save_checkpoint(path, state)

    def restore_rng(self, saved: dict[str, Any], gen: torch.Generator, *, seed: int) -> None:
        """This rank's RNG state from ``saved``; with another world size, rank r > 0 reseeds its data
        generator from (seed, rank, step) and rank 0 notes that the data order differs."""
        ranks = saved.get("rng_ranks") or [saved["rng"]]
        if len(ranks) == self.world:
            restore_rng(ranks[self.rank], gen)
            return
        restore_rng(ranks[0], gen)
        if self.rank:
            gen.manual_seed(self.data_seed(seed) + int(saved["step"]))
        if self.is_main:
            print(f"{self.label()} note: the checkpoint was written by {len(ranks)} rank(s), this run has "
                  f"{self.world}: training continues, but the data order differs from an uninterrupted run",
                  file=sys.stderr, flush=True)

    # -- failure
    def dead_peers(self) -> list[tuple[int, int]]:
        return [(r, pid) for r, pid in enumerate(self.pids) if r != self.rank and not _alive(pid)]

    def diagnose(self, wait_s: float = 3.0) -> str:
        """One line naming the dead rank(s), waiting briefly for a failing peer to finish exiting."""
        end = time.monotonic() + wait_s
        dead = self.dead_peers()
        while not dead and time.monotonic() < end:
            time.sleep(0.1)
            dead = self.dead_peers()
        if not dead:
            return f"{self.label()} stopping; every other rank is still running"
        names = ", ".join(f"rank {r} (pid {pid})" for r, pid in dead)
        return (f"{self.label()} {names} died; this rank stops too. No checkpoint is left half-written: "
                f"re-run the same command (--nproc {self.world}) to resume from the last checkpoint")


def compile_summary(rank: int, telemetry: Any) -> dict[str, Any]:
    """One rank's compile counters after training: warm-up compiles, steady-state (re)compiles."""
    out: dict[str, Any] = {"rank": rank, "compiled": telemetry.monitor.started}
    if telemetry.monitor.started:
        snap = telemetry.monitor.snapshot()
        keys = ("compiles", "recompiles", "graph_breaks")
        out["phase"] = snap["phase"]
        for phase in ("warmup", "steady"):
            out[phase] = None if snap[phase] is None else {k: snap[phase].get(k) for k in keys}
    return out


_SINGLE = Dist()
_current: Dist = _SINGLE


def current() -> Dist:
    """The active session's :class:`Dist`, or the single-process one."""
    return _current


def _watchdog(d: Dist, stop: threading.Event) -> None:
    while not stop.wait(WATCHDOG_INTERVAL_S):
        if d.dead_peers():
            msg = d.diagnose(wait_s=0.0)
            d.save_lock.acquire(timeout=60)  # a checkpoint write that started finishes first (held until exit)
            print(msg, file=sys.stderr, flush=True)
            os._exit(EXIT_PEER_DIED)  # the main thread may be blocked in a collective: leave from here


def _env_int(name: str) -> int:
    value = os.environ.get(name)
    if value is None:
        raise RuntimeError(f"{name} is not set: distributed training runs under torchrun "
                           "(bash run10.sh --nproc N starts it)")
    return int(value)


@contextlib.contextmanager
def session(cfg: RunConfig) -> Iterator[Dist]:
    """Join the torchrun process group for ``cfg``; :func:`current` returns it until exit."""
    global _current
    from mc.build import resolve_device  # noqa: PLC0415

    rank, world, local_rank = _env_int("RANK"), _env_int("WORLD_SIZE"), _env_int("LOCAL_RANK")
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    device = resolve_device(cfg.train.device)
    kwargs: dict[str, Any] = {"timeout": timedelta(seconds=cfg.train.dist_timeout_s)}
    if device.type == "cuda":
        if torch.cuda.device_count() < local_world:
            raise RuntimeError(f"--nproc {local_world} needs {local_world} GPUs (one per rank) but torch sees "
                               f"{torch.cuda.device_count()}; use --nproc {torch.cuda.device_count()} or train.device=cpu")
        torch.cuda.set_device(local_rank)
        backend = "nccl"
        if "device_id" in inspect.signature(tdist.init_process_group).parameters:
            kwargs["device_id"] = torch.device("cuda", local_rank)
    else:
        backend = "gloo"
    tdist.init_process_group(backend, **kwargs)
    d = Dist(rank=rank, world=world, local_rank=local_rank, enabled=True, backend=backend)
    d.pids = d.gather(os.getpid())
    dyn = getattr(getattr(torch, "_dynamo", None), "config", None)
    if dyn is not None and hasattr(dyn, "optimize_ddp"):
        # The compiled nets run inside DDP's forward; keep Dynamo from splitting their graphs at DDP
        # bucket boundaries, so each rank compiles exactly what the compile gate verified.
        dyn.optimize_ddp = False
    stop = threading.Event()
    dog = threading.Thread(target=_watchdog, args=(d, stop), name="mc-peer-watchdog", daemon=True)
    dog.start()

    def on_term(signum: int, frame: Any) -> None:  # torchrun stops the survivors when a rank fails
        print(f"{d.diagnose(wait_s=0.5)} (stopped by the launcher, signal {signum})", file=sys.stderr, flush=True)
        raise SystemExit(128 + signum)

    old_term = signal.signal(signal.SIGTERM, on_term)
    _current = d
    ok = False
    try:
        yield d
        ok = True
    finally:
        _current = _SINGLE
        if ok:
            tdist.barrier()  # everyone finished: a rank that exits now is not a dead peer
        stop.set()
        dog.join()
        if ok:
            tdist.barrier()  # ... and no watchdog is left to see the others exit
        signal.signal(signal.SIGTERM, old_term)
        if ok:  # after a failure a collective may still be pending: leave the group to process exit
            tdist.destroy_process_group()
