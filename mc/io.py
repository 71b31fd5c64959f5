"""Atomic file writes: the one place the project writes a file a reader may see mid-write.

Owns: :func:`atomic_write` (a temporary file in the *same directory*, flushed and fsynced, then
``os.replace`` onto the target: ``os.replace`` is atomic only within one filesystem, so a reader,
or a run resumed after a crash, sees either the old file or the complete new one, never half a
file; the temporary is removed when the write fails), the typed wrappers :func:`write_text`,
:func:`write_json`, :func:`write_bytes` and :func:`torch_save`, and :func:`clean_stale_tmp`,
which removes the temporaries a *killed* writer could not remove (no ``except`` runs on SIGKILL).

Temporary names are ``.<target name>.<random>.tmp`` (hidden, unique per writer), so two writers
of different files in one folder never collide and ``clean_stale_tmp`` finds them by suffix.
See obsidian "Training" (checkpoints and resume) for where the clean-up runs.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import IO, Any, Callable

TMP_SUFFIX = ".tmp"


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], None]) -> Path:
    """Call ``write(f)`` on a binary temp file next to ``path``, then move it onto ``path`` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TMP_SUFFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())  # the bytes are on disk before the rename makes them visible
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically."""
    return atomic_write(path, lambda f: f.write(data))


def write_text(path: str | os.PathLike, text: str, *, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically."""
    return write_bytes(path, text.encode(encoding))


def write_json(path: str | os.PathLike, data: Any, *, indent: int | None = 2) -> Path:
    """Write ``data`` as JSON (non-JSON values via ``str``, a trailing newline) to ``path`` atomically.

    The whole document is serialised before the temp file is opened: a value that cannot be
    serialised raises with nothing written.
    """
    return write_text(path, json.dumps(data, indent=indent, default=str) + "\n")


def torch_save(path: str | os.PathLike, obj: Any) -> Path:
    """``torch.save(obj)`` to ``path`` atomically."""
    import torch  # noqa: PLC0415 - keeps `import mc.io` free of torch for the light callers

    return atomic_write(path, lambda f: torch.save(obj, f))


def clean_stale_tmp(folder: str | os.PathLike, *, recursive: bool = False) -> list[Path]:
    """Remove ``*.tmp`` files a killed writer left in ``folder`` (and below when ``recursive``).

    Call it only where no other writer of that folder is running (the start of a stage or a
    resume), else it could delete a write in flight. Returns the removed paths.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    pattern = f"**/*{TMP_SUFFIX}" if recursive else f"*{TMP_SUFFIX}"
    removed = []
    for p in sorted(folder.glob(pattern)):  # pathlib's glob matches hidden names too
        if p.is_file():
            p.unlink()
            removed.append(p)
    return removed
