"""Checkpoints: atomic save, checked load, and the RNG state that makes a resume exact.

Owns: :func:`save_checkpoint` (an atomic write through :func:`mc.io.torch_save`: a reader sees
either the old file or the complete new one, never half a file), :func:`load_checkpoint` (the
only reader of ``.pt`` files: clear errors for a missing, empty or corrupt file), and :func:`rng_state` /
:func:`restore_rng` (torch CPU RNG, CUDA RNG when present, Python ``random``, and the data
``torch.Generator`` the loops draw batches and variants from).

A checkpoint is a plain dict; the loops put ``model``/``controller``, ``optimizer``, ``step``,
``rng`` and ``config`` (the resolved config as a dict) in it.
"""
from __future__ import annotations

import os
import pickle
import random
import zipfile
from pathlib import Path
from typing import Any

import torch

from mc.io import torch_save


class CheckpointError(RuntimeError):
    """A checkpoint file is missing, empty, truncated or not a checkpoint."""


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
