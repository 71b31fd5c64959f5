"""Pieces both training loops share: device set-up, data samplers, metrics files, resume checks.

Owns: :func:`setup_device` (resolve + matmul precision), :func:`make_sampler`
(the corpus + recall mix of ``data.recall_mix`` at one sequence length), :class:`MetricsLog`
(``metrics.jsonl``: one JSON object per logged step, truncated back to the checkpoint's step on
resume so a resumed run never shows steps twice; mirrored to TensorBoard with ``train.tensorboard``) and :func:`check_resume_config`.
"""
from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any, Callable

import torch

from mc.build import resolve_device
from mc.config import ConfigError, RecallConfig, RunConfig, to_dict, with_defaults
from mc.data.hf_tokenizer import tokenizer_for
from mc.data.loader import Stage2Sampler, make_source
from mc.data.recall import fit_recall
from mc.io import append_text, write_text
from mc.train.tb_log import TensorBoardLog


def setup_device(cfg: RunConfig) -> torch.device:
    device = resolve_device(cfg.train.device)
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high")  # TF32 matmuls: the usual speed/precision trade on GPUs
    return device


def make_sampler(cfg: RunConfig, split: str, seq_len: int, *, max_files: int | None = None,
                 stage1: bool = False) -> Stage2Sampler:
    """Corpus windows mixed with recall documents (share ``data.recall_mix``), all ``seq_len`` long.

    ``data.source=recall`` gives recall documents only. ``max_files`` caps the stdlib corpus (tests).
    ``stage1``: recall rows are shifted documents when ``data.recall.stage1_min_tokens`` > 0; otherwise
    (stage 2) ``data.recall.stage2_records_region`` and ``stage2_n_records``, when set, replace
    ``records_region`` and ``n_records``.
    """
    rc = cfg.data.recall
    if not stage1 and rc.stage2_records_region:
        rc = dataclasses.replace(rc, records_region=rc.stage2_records_region)
    if not stage1 and rc.stage2_n_records:
        rc = dataclasses.replace(rc, n_records=rc.stage2_n_records)
    recall = fit_recall(rc, seq_len)
    for n in [] if stage1 else cfg.mc.history_mix:  # a mix length too short for one record fails at start-up
        fit_recall(rc, n)
    tok = tokenizer_for(cfg.model)  # bytes, or the model=hf base's own tokenizer
    shifted = cfg.data.recall.stage1_min_tokens if stage1 else 0
    if cfg.data.source == "recall":
        return Stage2Sampler(None, recall, 1.0, split, tok, shifted_min=shifted)
    return Stage2Sampler(make_source(cfg.data, split, max_files=max_files, tokenizer=tok), recall, cfg.data.recall_mix,
                         split, tok, shifted_min=shifted)


class MetricsLog:
    """Append-only JSONL of per-step metrics; on resume, lines after the checkpoint step are cut.
    With ``tensorboard_dir`` each record's scalars also go to TensorBoard (:mod:`mc.train.tb_log`)."""

    def __init__(self, path: Path, *, resume_step: int | None, tensorboard_dir: Path | None = None):
        self.path = Path(path)
        self.tb = TensorBoardLog(tensorboard_dir, resume_step=resume_step) if tensorboard_dir is not None else None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is None:
            write_text(self.path, "")
        elif self.path.exists():
            kept = [line for line in self.path.read_text().splitlines()
                    if line.strip() and json.loads(line).get("step", 0) <= resume_step]
            write_text(self.path, "".join(line + "\n" for line in kept))  # a crash here keeps the old log

    def write(self, record: dict[str, Any]) -> None:
        append_text(self.path, json.dumps(record) + "\n")  # fsynced; a failed append leaves no half line
        if self.tb is not None:
            self.tb.write(record)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


def read_metrics(path: str | os.PathLike) -> list[dict]:
    """All records of a ``metrics.jsonl`` (empty list when the file does not exist)."""
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# Keys that may change between a checkpoint and its resume without changing what is trained.
_RESUMABLE_CHANGES = ("steps", "eval_every", "eval_batches", "ckpt_every")


def check_resume_config(saved: dict, cfg: RunConfig, stage: str, path: Path) -> None:
    """A checkpoint of another model shape or training setting cannot be resumed: a ConfigError (one line from
    run10.sh, no traceback) naming the keys that differ and both ways out."""
    now = to_dict(cfg)
    saved = with_defaults(saved)  # keys added to the code since the checkpoint count as their defaults
    for section in ("model",) + (("gistnet", "lensnet", "mc") if stage == "stage2" else ()):
        if saved.get(section) != now[section]:
            diff = sorted(k for k in now[section] if saved.get(section, {}).get(k) != now[section][k])
            raise ConfigError(f"{path} was written with a different {section} config (keys {', '.join(diff)}); "
                              f"use another run name or delete {path.parent} to retrain")
    old = {k: v for k, v in saved["train"][stage].items() if k not in _RESUMABLE_CHANGES}
    new = {k: v for k, v in now["train"][stage].items() if k not in _RESUMABLE_CHANGES}
    if old != new:
        diff = sorted(k for k in new if old.get(k) != new[k])
        was = ", ".join(f"{k}={old.get(k)!r}" for k in diff)
        raise ConfigError(f"{path} was written with different train.{stage} settings (then {was}); only "
                          f"{', '.join(_RESUMABLE_CHANGES)} may change on resume: set them back, use another run "
                          f"name, or delete {path.parent} to retrain that stage")


# ----------------------------------------------------------------------------- the parts both loops share
def resume_into(saved: dict | None, net: Any, key: str, optimizer: torch.optim.Optimizer) -> int:
    """Load ``saved[key]`` into ``net`` (a module or the controller: anything with ``load_state_dict``) and
    the optimizer state; the step to continue from (0: fresh start)."""
    if saved is None:
        return 0
    net.load_state_dict(saved[key])
    optimizer.load_state_dict(saved["optimizer"])
    return int(saved["step"])


def loop_io(cfg: RunConfig, out_dir: Path, seq_len: int, saved: dict | None, step: int, *,
            max_files: int | None, metrics_log: Callable[..., Any] = MetricsLog, stage1: bool = False,
            ) -> tuple[Stage2Sampler, Stage2Sampler, MetricsLog, dict[str, Any]]:
    """Train and val samplers of ``seq_len`` tokens, the metrics log (cut back to ``step`` on a
    resume; ``metrics_log`` makes it: under torchrun rank 0's log, a no-op on the other ranks) and
    the summary dict (the checkpoint's on a resume, so a finished run reports it all)."""
    train_data = make_sampler(cfg, "train", seq_len, max_files=max_files, stage1=stage1)
    val_data = make_sampler(cfg, "val", seq_len, max_files=max_files, stage1=stage1)
    metrics = metrics_log(out_dir / "metrics.jsonl", resume_step=step if saved is not None else None,
                          tensorboard_dir=out_dir / "tb" if cfg.train.tensorboard else None)
    summary: dict[str, Any] = dict(saved.get("summary") or {}) if saved is not None else {}
    return train_data, val_data, metrics, summary


def finish_loop(bar: Any, summary: dict[str, Any], step: int, steps_run: int, t_start: float,
                checkpoint: Callable[[], None]) -> None:
    """Close the progress bar, record the step time and the last step, write the final checkpoint."""
    bar.close()
    if steps_run:
        summary["sec_per_step"] = (time.perf_counter() - t_start) / steps_run
    summary["steps"] = step
    checkpoint()
