"""Faults and damage for the fault fuzz: a full disk, an unwritable or immutable folder, NaN weights.

Each is real where this machine allows it and injected otherwise: :func:`full_disk` and
:func:`unwritable` raise the ``OSError`` (ENOSPC, EROFS, EPERM) the kernel would, at the calls
:mod:`mc.io` and :mod:`mc.app.run_lock` make; :func:`immutable` uses ``chattr +i`` when it works (root
on ext4 and the like); :func:`poison` sets a checkpoint's weights to NaN; :func:`left_tmp` finds
temporaries a failed write left. Used by :mod:`mc.app.fault_cases`.
"""
from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator
from unittest import mock


@contextlib.contextmanager
def full_disk(budget: int) -> Iterator[None]:
    """Files written through ``mc.io`` (they all are) share ``budget`` bytes, then ENOSPC, as on a full disk."""
    real = os.fdopen
    left = [budget]

    def fdopen(fd, mode="r", *args, **kwargs):
        f = real(fd, mode, *args, **kwargs)
        if "w" not in mode:
            return f
        write = f.write

        def limited(data):
            if len(data) > left[0]:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            left[0] -= len(data)
            return write(data)

        f.write = limited
        return f

    with mock.patch.object(os, "fdopen", fdopen):
        yield


@contextlib.contextmanager
def unwritable(folder: Path, code: int) -> Iterator[None]:
    """Creating a file in ``folder`` fails with ``code`` (EROFS: a read-only mount, EPERM: ``chattr +i``)."""
    real_mkstemp, real_open = tempfile.mkstemp, os.open

    def inside(path) -> bool:
        return Path(path).resolve().is_relative_to(folder.resolve())

    def mkstemp(*args, dir=None, **kwargs):  # noqa: A002 - tempfile's own keyword
        if dir is not None and inside(dir):
            raise OSError(code, os.strerror(code), str(dir))
        return real_mkstemp(*args, dir=dir, **kwargs)

    def open_(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and inside(path) and not Path(path).exists():
            raise OSError(code, os.strerror(code), str(path))
        return real_open(path, flags, *args, **kwargs)

    with mock.patch.object(tempfile, "mkstemp", mkstemp), mock.patch.object(os, "open", open_):
        yield


@contextlib.contextmanager
def immutable(folder: Path) -> Iterator[str]:
    """``chattr +i folder`` (the issue's case; root on ext4 and the like), else the same EPERM injected."""
    chattr = shutil.which("chattr")
    if chattr and subprocess.run([chattr, "+i", str(folder)], capture_output=True).returncode == 0:
        try:
            yield "chattr +i"
        finally:
            subprocess.run([chattr, "-i", str(folder)], check=True)
    else:
        with unwritable(folder, errno.EPERM):
            yield "injected EPERM"


def poison(path: Path, section: str | None = None) -> None:
    """Every floating tensor of the checkpoint (or of its ``section``) set to NaN, as the issue's all-NaN base.pt."""
    import torch  # noqa: PLC0415

    from mc.train.checkpoint import load_checkpoint, save_checkpoint  # noqa: PLC0415

    state = load_checkpoint(path)

    def nan(obj):
        if torch.is_tensor(obj) and obj.is_floating_point():
            return torch.full_like(obj, float("nan"))
        return {k: nan(v) for k, v in obj.items()} if isinstance(obj, dict) else obj

    if section is None:
        state = nan(state)
    else:
        state[section] = nan(state[section])
    save_checkpoint(path, state)


def left_tmp(folder: Path) -> str | None:
    found = sorted(str(p) for p in folder.rglob("*.tmp")) if folder.is_dir() else []
    return f"temporaries left behind: {found}" if found else None
