"""Optional TensorBoard mirror of the training metrics (``train.tensorboard=true``; see obsidian Training).

The JSONL ``metrics.jsonl`` stays the record every tool reads (report, plots, resume); this module
only writes the same numeric scalars, per logged step, to ``<run>/stage{1,2}/tb/`` for people who
watch runs in TensorBoard. The writer is ``torch.utils.tensorboard.SummaryWriter``, which needs the
``tensorboard`` package (the ``tb`` extra): a run asking for it without the package stops at start-up
with one line naming the fix (:func:`require_tensorboard`), never halfway through stage 1.
"""
from __future__ import annotations

import math
import os
from typing import Any

from mc.config import ConfigError

INSTALL_HINT = "pip install '.[tb]'"


def summary_writer_class() -> Any:
    """``SummaryWriter`` (raises ImportError without the tensorboard package; tests patch this)."""
    from torch.utils.tensorboard import SummaryWriter  # noqa: PLC0415 - optional dependency

    return SummaryWriter


def require_tensorboard(cfg: Any) -> None:
    """A :class:`ConfigError` when ``cfg.train.tensorboard`` is on and the writer cannot be imported."""
    if not cfg.train.tensorboard:
        return
    try:
        summary_writer_class()
    except ImportError as exc:
        raise ConfigError(f"config train.tensorboard=true needs the tensorboard package, which is not installed "
                          f"({exc}): run {INSTALL_HINT} or set train.tensorboard=false") from exc


class TensorBoardLog:
    """Every finite numeric value of a metrics record as a scalar at the record's ``step``.

    On a resume (``resume_step``) the events after that step are purged, as the JSONL is cut back,
    so a resumed curve has no doubled tail.
    """

    def __init__(self, log_dir: str | os.PathLike, *, resume_step: int | None) -> None:
        try:
            writer_cls = summary_writer_class()
        except ImportError as exc:
            raise ConfigError(f"train.tensorboard=true but tensorboard is not installed ({exc}): run {INSTALL_HINT}") from exc
        purge = None if resume_step is None else resume_step + 1
        self.writer = writer_cls(log_dir=str(log_dir), purge_step=purge)

    def write(self, record: dict[str, Any]) -> None:
        step = int(record["step"])
        for key, value in record.items():
            # bools and strings are not curves; NaN/inf would break TensorBoard's axis scaling
            if key == "step" or isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                continue
            self.writer.add_scalar(key, float(value), step)
        self.writer.flush()  # a killed run keeps what it logged, like the fsynced JSONL

    def close(self) -> None:
        self.writer.close()
