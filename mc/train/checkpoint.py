"""Checkpoints: atomic save, checked load, and the RNG state that makes a resume exact.

Owns: :func:`save_checkpoint` (an atomic write through :func:`mc.io.torch_save`: a reader sees
either the old file or the complete new one, never half a file), :func:`load_checkpoint` (the
only reader of ``.pt`` files: clear errors for a missing, empty or corrupt file), and :func:`rng_state` /
:func:`restore_rng` (torch CPU RNG, CUDA RNG when present, Python ``random``, and the data
``torch.Generator`` the loops draw batches and variants from).

A checkpoint is a plain dict; the loops put ``model``/``controller``, ``optimizer``, ``step``,
``rng`` and ``config`` (the resolved config as a dict) in it.

Non-finite values: :func:`check_finite` refuses weights holding NaN/inf where they are loaded (base
weights, the stage-2 nets, a resume), naming the file and the first bad tensor; on the training side
:class:`DivergenceGuard` stops a loop whose loss or weights went non-finite *before* it saves, so the
checkpoint on disk always holds the last good weights, and the message says which one that is.
"""
from __future__ import annotations

import math
import os
import pickle
import random
import zipfile
from pathlib import Path
from typing import Any, Iterator

import torch

from mc.io import torch_save


class CheckpointError(RuntimeError):
    """A checkpoint file is missing, empty, truncated, not a checkpoint, or holds non-finite weights."""


class TrainingDiverged(FloatingPointError):
    """A training loss or the weights went NaN/inf; nothing was saved after the last good checkpoint."""


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> Path:
    """Write ``state`` to ``path`` atomically (see :mod:`mc.io`)."""
    if not isinstance(state, dict):
        raise ValueError(f"save_checkpoint: state must be a dict, got {type(state).__name__}")
    return torch_save(path, state)


def load_checkpoint(path: str | os.PathLike, *, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint`; CheckpointError / FileNotFoundError
    with the path and what to do when it is missing or unreadable."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    if path.stat().st_size == 0:
        raise CheckpointError(f"checkpoint {path} is empty (0 bytes); delete it to start that stage again")
    try:
        state = torch.load(path, map_location=map_location, weights_only=False)
    except (RuntimeError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile, ValueError, OSError) as e:
        raise CheckpointError(f"checkpoint {path} is corrupt or truncated ({type(e).__name__}: {e}); "
                              "delete it to start that stage again") from e
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint {path} holds a {type(state).__name__}, expected a dict")
    return state


def rng_state(data_generator: torch.Generator | None = None) -> dict[str, Any]:
    """Every RNG a training step may draw from."""
    out: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        out["cuda"] = torch.cuda.get_rng_state_all()
    if data_generator is not None:
        out["data"] = data_generator.get_state()
    return out


def restore_rng(state: dict[str, Any], data_generator: torch.Generator | None = None) -> None:
    """Inverse of :func:`rng_state` (CUDA state only when this process has CUDA)."""
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if data_generator is not None:
        if "data" not in state:
            raise CheckpointError("checkpoint has no data-generator state; it was not written by this loop")
        data_generator.set_state(state["data"])


def require_keys(state: dict, keys: tuple[str, ...], path: str | os.PathLike) -> None:
    missing = [k for k in keys if k not in state]
    if missing:
        raise CheckpointError(f"checkpoint {path} lacks {', '.join(missing)}; it was written by another "
                              "stage or version: delete it to start that stage again")


# ----------------------------------------------------------------------------- non-finite values
def _float_tensors(obj: Any, name: str) -> Iterator[tuple[str, torch.Tensor]]:
    """Every floating-point tensor in nested dicts / lists / tuples, with a dotted name (RNG states are
    byte tensors and optimizer steps integers: neither can be NaN, so they are skipped)."""
    if isinstance(obj, torch.Tensor):
        if obj.is_floating_point() or obj.is_complex():
            yield name, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _float_tensors(v, f"{name}.{k}" if name else str(k))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _float_tensors(v, f"{name}[{i}]")


def first_non_finite(state: Any) -> str | None:
    """``"<tensor name> (<n> NaN/inf of <numel>)"`` for the first tensor in ``state`` holding a NaN or an
    inf, else None. One host read per device (the per-tensor flags are stacked first)."""
    items = list(_float_tensors(state, ""))
    by_device: dict[torch.device, list[int]] = {}
    for i, (_, t) in enumerate(items):
        by_device.setdefault(t.device, []).append(i)
    bad: list[int] = []
    for idx in by_device.values():
        flags = torch.stack([torch.isfinite(items[i][1]).all() for i in idx]).tolist()
        bad += [i for i, ok in zip(idx, flags) if not ok]
    if not bad:
        return None
    name, t = items[min(bad)]
    return f"{name or 'the tensor'} ({int((~torch.isfinite(t)).sum())} NaN/inf of {t.numel()})"


def check_finite(state: Any, path: str | os.PathLike, *, fix: str = "delete it and re-run the stage that wrote it") -> None:
    """Refuse weights loaded from ``path`` that hold NaN or inf: :class:`CheckpointError` naming the file,
    the first such tensor, and ``fix`` (what to do about it)."""
    bad = first_non_finite(state)
    if bad is not None:
        raise CheckpointError(f"{path} holds non-finite weights: {bad}; {fix}")


def load_finite_checkpoint(path: str | os.PathLike, *, fix: str) -> dict[str, Any]:
    """:func:`load_checkpoint`, then :func:`check_finite` (``fix``: what to do about NaN/inf weights)."""
    state = load_checkpoint(path)
    check_finite(state, path, fix=fix)
    return state


class DivergenceGuard:
    """Stops a training loop whose loss or weights went non-finite, before anything is saved.

    ``good_step`` is the step of the checkpoint on disk at ``ckpt_path`` (None: none yet); the loop
    calls :meth:`saved` after each checkpoint. Every message names that checkpoint as the last good
    weights and the ways on: the same config repeats the divergence (training is deterministic), so
    a lower ``lr_key`` under a new ``--name``, or that checkpoint deleted and the stage redone.
    """

    def __init__(self, stage: str, ckpt_path: Path, lr_key: str, good_step: int | None) -> None:
        """``stage`` as the workflow names it (``stage1``, ``stage2``)."""
        self.stage, self.ckpt_path, self.lr_key, self.good_step = stage, Path(ckpt_path), lr_key, good_step

    def saved(self, step: int) -> None:
        self.good_step = step

    def check_loss(self, losses: dict[str, float], step: int, lr: float) -> None:
        bad = {k: v for k, v in losses.items() if not math.isfinite(v)}
        if bad:
            shown = ", ".join(f"{k} {v}" for k, v in bad.items())
            raise TrainingDiverged(self._message(f"loss is not finite at step {step} ({shown}; lr {lr:.2e})"))

    def check_weights(self, state: Any, step: int) -> None:
        bad = first_non_finite(state)
        if bad is not None:
            raise TrainingDiverged(self._message(f"weights are not finite after step {step}: {bad}"))

    def _message(self, what: str) -> str:
        again = f"lower {self.lr_key} under a new --name, or "
        if self.good_step is None:
            kept = f"no checkpoint was written before it ({self.ckpt_path} does not exist)"
            again += f"re-run here with --force={self.stage} and a lower {self.lr_key}"
        else:
            kept = f"{self.ckpt_path} (step {self.good_step}) holds the last good weights"
            again += f"delete {self.ckpt_path} and re-run with --force={self.stage} and a lower {self.lr_key}"
        return f"{self.stage} {what}; nothing was saved after that: {kept}. The same config diverges the same way again: {again}"
