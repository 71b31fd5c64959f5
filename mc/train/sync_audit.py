"""Proof that a stage-2 micro-step's device half never waits for the host: the host-sync audit.

Owns :func:`audit_micro_step` (runs anywhere, CPU included) and :func:`cuda_sync_check` (a GPU).
The micro-step audited is what the training loop runs per micro-step after the plan was made:
``controller.run_step(plan)``, ``step_stats(out)``, ``(out.total / grad_accum).backward()``,
``controller.end_micro_step()``. A host-device sync is one of two things:

* the host reads a device value: ``.item()``, ``bool(t)``, ``.tolist()``, ``.cpu()``, an op whose
  output shape depends on values (``nonzero``, boolean indexing). :func:`audit_micro_step` runs
  the device half with every net and tensor on the ``meta`` device, where each of these raises
  (meta tensors hold no data), so one that runs clean reads nothing back;
* a blocking host->device copy: ``torch.tensor(x, device=d)``, a blocking ``.to(d)`` / ``.copy_``
  of host data. A ``TorchFunctionMode`` records every one.

On a GPU, :func:`cuda_sync_check` runs real micro-steps under
``torch.cuda.set_sync_debug_mode("error")``, which raises on any synchronising CUDA call.
The documented syncs are outside the micro-step: the metrics fetch every ``train.log_every``
optimizer steps and validation (obsidian "Training": no host-device sync in a micro-step).
"""
from __future__ import annotations

import copy
import traceback
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

from mc.config import RunConfig

_HOST_DATA_FACTORIES = ("tensor", "as_tensor", "from_numpy", "asarray")
_MC_ROOT = str(Path(__file__).resolve().parents[1])


def _where() -> str:
    """The innermost frame in the mc package that made the current call (for the report)."""
    frames = [f for f in traceback.extract_stack()[:-2] if f.filename.startswith(_MC_ROOT)
              and not f.filename.endswith("sync_audit.py")]
    return f"{frames[-1].filename[len(_MC_ROOT) - 2:]}:{frames[-1].lineno}" if frames else "?"


def _device_of(value) -> torch.device | None:
    if isinstance(value, torch.Tensor):
        return value.device
    if isinstance(value, (str, torch.device)):
        return torch.device(value)
    return None


class BlockingCopyRecorder(TorchFunctionMode):
    """Records host->device copies that block the host (the device is anything but the CPU)."""

    def __init__(self) -> None:
        super().__init__()
        self.copies: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        if name in _HOST_DATA_FACTORIES:
            dev = _device_of(kwargs.get("device"))
            if dev is not None and dev.type != "cpu":
                self.copies.append(f"torch.{name}(..., device={dev}) at {_where()}")
        elif name in ("to", "copy_", "cuda") and args and isinstance(args[0], torch.Tensor):
            src = args[1] if name == "copy_" and len(args) > 1 else args[0]
            dst = args[0].device if name == "copy_" else next(
                (d for d in map(_device_of, (*args[1:], kwargs.get("device"))) if d is not None),
                torch.device("cuda") if name == "cuda" else None)
            blocking = not kwargs.get("non_blocking", False) and not (name == "to" and any(a is True for a in args[1:]))
            if isinstance(src, torch.Tensor) and src.device.type == "cpu" and dst is not None \
                    and dst.type != "cpu" and blocking:
                self.copies.append(f"blocking {name} of host data to {dst} at {_where()}")
        return func(*args, **kwargs)


def audit_micro_step(cfg: RunConfig, *, micro_steps: int = 2) -> dict:
    """Run ``micro_steps`` device halves at ``cfg``'s geometry on the meta device (no compute, so
    the ``h100`` geometry costs only the host plans); report host reads and blocking copies.

    Compile modes are turned off for the audit (Inductor does not run on meta); the compiled nets
    are the same modules, and their graphs are checked on a GPU by :func:`cuda_sync_check`."""
    from mc.build import build_controller  # noqa: PLC0415 - the audit is optional tooling
    from mc.train.stage2 import step_stats  # noqa: PLC0415

    cfg = copy.deepcopy(cfg)
    for net in (cfg.compile.lensnet, cfg.compile.gistnet):
        net.train = net.inference = "off"
    cfg.telemetry.jsonl = False
    meta = torch.device("meta")
    with meta:  # parameters are never initialised: no compute, whatever the model size
        ctrl = build_controller(cfg, device=meta)
    gen = torch.Generator().manual_seed(cfg.train.seed)
    b, t = cfg.train.stage2.batch_size, cfg.mc.history_tokens
    reads: list[str] = []
    recorder = BlockingCopyRecorder()
    for _ in range(micro_steps):
        plan = ctrl.prepare_step(torch.randint(0, 256, (b, t), generator=gen), gen)  # host half: may sync freely
        try:
            with recorder:
                out = ctrl.run_step(plan)
                step_stats(out)
                (out.total / cfg.train.stage2.grad_accum).backward()
                ctrl.end_micro_step()
        except (RuntimeError, NotImplementedError) as exc:
            if "meta" not in str(exc).lower():
                raise  # not a host read of a (data-less) meta value: a real error
            tb = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith(_MC_ROOT)
                  and not f.filename.endswith("sync_audit.py")]
            where = f"{tb[-1].filename[len(_MC_ROOT) - 2:]}:{tb[-1].lineno}" if tb else "?"
            reads.append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]} at {where}")
            break
    return {"passed": not reads and not recorder.copies, "host_reads": reads, "blocking_copies": recorder.copies,
            "micro_steps": micro_steps, "geometry": {"batch": b, "variants": 1 + cfg.mc.n_random_variants,
                                                     "tokens": t, "entries": cfg.mc.max_entries}}


def cuda_sync_check(ctrl, cfg: RunConfig, *, micro_steps: int = 3) -> dict:
    """Real micro-steps on a CUDA controller under ``set_sync_debug_mode("error")`` (after two
    unchecked ones: first calls may initialise libraries). Plans are made before the checked region,
    as the prefetch thread makes them. ``{"passed", "error", "micro_steps"}``."""
    from mc.train.stage2 import step_stats  # noqa: PLC0415

    gen = torch.Generator().manual_seed(cfg.train.seed)
    b, t = cfg.train.stage2.batch_size, cfg.mc.history_tokens
    plans = [ctrl.prepare_step(torch.randint(0, 256, (b, t), generator=gen), gen) for _ in range(micro_steps + 2)]
    error = None
    for i, plan in enumerate(plans):
        checked = i >= 2
        try:
            if checked:
                torch.cuda.set_sync_debug_mode("error")
            out = ctrl.run_step(plan)
            step_stats(out)
            (out.total / cfg.train.stage2.grad_accum).backward()
            ctrl.end_micro_step()
        except RuntimeError as exc:
            if not checked:
                raise
            error = f"{str(exc).splitlines()[0][:300]}\n{''.join(traceback.format_tb(exc.__traceback__)[-4:])}"
            break
        finally:
            torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    return {"passed": error is None, "error": error, "micro_steps": micro_steps}
