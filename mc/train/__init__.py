"""Training: stage 1 (base GPT pretraining) and stage 2 (GistNet + LensNet through the controller).

Modules: ``optim`` (AdamW + warm-up/cosine schedule), ``checkpoint`` (atomic save, checked load,
RNG state), ``common`` (device, samplers, metrics files, resume checks), ``stage1``, ``stage2``.
See obsidian [[Training]].

``train_stage1`` / ``train_stage2`` are imported on first use: the stages import :mod:`mc.build`,
which loads weights through :mod:`mc.train.checkpoint`, so an eager import here would be a cycle.
"""
from typing import Any

from mc.train.checkpoint import CheckpointError, load_checkpoint, save_checkpoint

__all__ = ["train_stage1", "train_stage2", "save_checkpoint", "load_checkpoint", "CheckpointError"]


def __getattr__(name: str) -> Any:
    if name == "train_stage1":
        from mc.train.stage1 import train_stage1  # noqa: PLC0415
        return train_stage1
    if name == "train_stage2":
        from mc.train.stage2 import train_stage2  # noqa: PLC0415
        return train_stage2
    raise AttributeError(f"module 'mc.train' has no attribute {name!r}")
