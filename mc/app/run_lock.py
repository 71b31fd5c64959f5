"""One writer per run folder: an OS lock (``fcntl.flock``) on ``<run>/.lock`` held for the whole run.

Owns :class:`RunLock` (take it with ``with RunLock(run_dir):`` right after the run folder is resolved and
before anything is written; a second run on the same folder gets :class:`RunFolderBusy`, exit 2, naming
the holder's pid) and :func:`held_lock_fds` (what a child process that writes into the run folder
inherits: see below). See obsidian "Runbook" (run folders).

Why ``flock`` and not a pid file: the kernel drops the lock when the last descriptor of it closes,
which a SIGKILL does too, so a killed run's lock is stale by construction and the next run simply
takes it (the pid written inside is only for the messages). The file itself is never deleted: a
process that opened it just before a delete would lock an orphaned inode while a third process
locks a new file, and both would think they are alone.

Children: the workflow passes the lock's descriptor to the processes it starts that write into the
run folder (torchrun for ``--nproc``, the compile harness), so a workflow killed with SIGKILL keeps
the folder locked until those children end too; they never take the lock themselves (they do not
call :class:`RunLock`), and a descriptor shared this way is the same lock, not a second one.
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

from mc.config import ConfigError
from mc.io import WriteError

LOCK_NAME = ".lock"
_held: dict[Path, int] = {}  # lock path -> descriptor, for every lock this process holds


class RunFolderBusy(ConfigError):
    """Another process holds the run folder's lock (the workflow exits 2)."""


def held_lock_fds() -> tuple[int, ...]:
    """Descriptors of the run-folder locks this process holds (``subprocess.run(..., pass_fds=...)``)."""
    return tuple(_held.values())


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    return True


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


class RunLock:
    """``with RunLock(run_dir) as lock:`` holds ``<run_dir>/.lock`` exclusively (the folder is created).

    ``previous_pid``: the pid the lock file still named when it was taken, i.e. a holder that ended
    without releasing it (killed), or None (a fresh folder, or the last run released it). An OS error creating the folder or the lock file is a
    :class:`mc.io.WriteError` (exit 1); another holder is :class:`RunFolderBusy` (exit 2).
    """

    def __init__(self, run_dir: str | os.PathLike) -> None:
        self.path = Path(run_dir) / LOCK_NAME
        self.fd: int | None = None
        self.previous_pid: int | None = None

    def acquire(self) -> "RunLock":
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise WriteError(self.path, exc) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise RunFolderBusy(self._busy_message(holder)) from None
        except OSError as exc:  # e.g. ENOLCK: a filesystem without flock
            os.close(fd)
            raise WriteError(self.path, exc) from exc
        self.previous_pid = _read_pid(fd)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        except OSError as exc:  # a full disk: the run could not write anything else either
            os.close(fd)
            raise WriteError(self.path, exc) from exc
        self.fd = fd
        _held[self.path] = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            _held.pop(self.path, None)
            try:
                os.ftruncate(self.fd, 0)  # a released lock names nobody; a pid left behind means a killed holder
            finally:
                os.close(self.fd)  # the lock goes with the last descriptor; the file stays (see the module doc)
                self.fd = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _busy_message(self, holder: int | None) -> str:
        folder = self.path.parent
        if holder is None:
            who = "another process (its pid is not recorded yet)"
        elif _pid_alive(holder):
            who = f"another run (pid {holder})"
        else:
            who = (f"processes that run pid {holder} started (pid {holder} itself has ended; its torchrun ranks "
                   "or compile harness still run)")
        return (f"run folder {folder} is in use by {who}: one run writes to a folder at a time. Wait for it to "
                f"finish (or stop it), or pick another folder with --name=NEW")
