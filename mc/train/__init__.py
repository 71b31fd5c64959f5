"""Training: stage 1 (base GPT pretraining) and stage 2 (GistNet + LensNet through the controller).

Modules: ``optim`` (AdamW + warm-up/cosine schedule), ``checkpoint`` (atomic save, checked load,
RNG state), ``common`` (device, samplers, metrics files, resume checks), ``stage1``, ``stage2``.
See obsidian [[Training]].
"""
from mc.train.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from mc.train.stage1 import train_stage1
from mc.train.stage2 import train_stage2

__all__ = ["train_stage1", "train_stage2", "save_checkpoint", "load_checkpoint", "CheckpointError"]
