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

An OS error on the way (disk full, permission denied, read-only filesystem) surfaces as
:class:`WriteError`, one line naming the target and the cause, also when ``torch.save`` buried the
``OSError`` under its own ``RuntimeError``; :func:`append_text` (the metrics log) cuts a failed
append back so no half line is left. :func:`describe_os_error` gives any other ``OSError`` the same
one-line form for the error messages of the workflow and the CLIs (obsidian "Runbook": exit codes).
"""
from __future__ import annotations

import errno
import json
import os
import tempfile
from pathlib import Path
from typing import IO, Any, Callable

TMP_SUFFIX = ".tmp"


class WriteError(OSError):
    """A file could not be written: ``cannot write <path>: <strerror> (<errno name>)``, raised from the OSError;
    `` at <where>`` is added when the cause names another path (a parent that is a file, say), not a temporary."""

    def __init__(self, path: str | os.PathLike, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.path = Path(path)
        where = os.fspath(cause.filename) if isinstance(cause.filename, (str, os.PathLike)) else None
        self.where = where if where and where != str(self.path) and not where.endswith(TMP_SUFFIX) else None

    def __str__(self) -> str:
        return f"cannot write {self.path}: {_cause_text(self)}" + (f" at {self.where}" if self.where else "")

    def __reduce__(self):  # OSError pickles its args, which are not this __init__'s
        return _rebuild_write_error, (str(self.path), self.errno, self.strerror, self.where)


def _rebuild_write_error(path: str, code: int | None, strerror: str | None, where: str | None) -> WriteError:
    return WriteError(path, OSError(code, strerror, where) if where else OSError(code, strerror))


def _cause_text(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno) if isinstance(exc.errno, int) else None
    return f"{exc.strerror or exc}" + (f" ({name})" if name else "")


def describe_os_error(exc: OSError) -> str:
    """One line for any OSError: WriteError's own text, else ``<path>: <strerror> (<errno name>)``
    (a message-only OSError, e.g. ``FileNotFoundError("run stage 1 first")``, is kept as it is)."""
    if isinstance(exc, WriteError) or exc.errno is None:
        return str(exc)
    where = f"{exc.filename}: " if exc.filename is not None else ""
    return where + _cause_text(exc)


# Causes a writer may report only as text (a C++ writer's RuntimeError), recognised by their strerror.
_TEXT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG, errno.EIO)


def _os_error_in(exc: BaseException) -> OSError | None:
    """The OSError behind ``exc``: itself, or one in its cause/context chain (``torch.save`` raises a
    RuntimeError "[enforce fail at inline_container.cc...]" while handling the writer's ENOSPC), or
    one whose strerror the chain's text quotes."""
    seen: set[int] = set()
    chain: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, OSError):
            return cur
        seen.add(id(cur))
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    for code in _TEXT_ERRNOS:
        if any(os.strerror(code) in str(e) for e in chain):
            return OSError(code, os.strerror(code))
    return None


def _file_in_the_way(path: Path) -> OSError | None:
    """mkdir reports a file where a parent folder should be as EEXIST; say what it is: ENOTDIR at that file."""
    for parent in path.parents:
        if parent.exists():
            return None if parent.is_dir() else OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(parent))
    return None


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], None]) -> Path:
    """Call ``write(f)`` on a binary temp file next to ``path``, then move it onto ``path`` atomically."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TMP_SUFFIX, dir=path.parent)
    except OSError as exc:
        raise WriteError(path, _file_in_the_way(path) or exc) from exc
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())  # the bytes are on disk before the rename makes them visible
        os.replace(tmp, path)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        cause = _os_error_in(exc) if isinstance(exc, Exception) else None
        if cause is not None and not isinstance(exc, WriteError):
            raise WriteError(path, cause) from exc
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


def write_results(data: Any, markdown: str, *, json_path: str | os.PathLike | None = None,
                  md_path: str | os.PathLike | None = None) -> None:
    """A measurement's outputs: the Markdown to stdout, then its JSON and Markdown files where asked (the
    bench scripts' ``--json`` / ``--md``)."""
    print(markdown)
    if json_path:
        write_json(json_path, data)
    if md_path:
        write_text(md_path, markdown)


def torch_save(path: str | os.PathLike, obj: Any) -> Path:
    """``torch.save(obj)`` to ``path`` atomically."""
    import torch  # noqa: PLC0415 - keeps `import mc.io` free of torch for the light callers

    return atomic_write(path, lambda f: torch.save(obj, f))


def append_text(path: str | os.PathLike, text: str) -> Path:
    """Append ``text`` (whole lines) to ``path`` and fsync it. On an OS error the file is cut back to
    its length before the append (a reader never meets half a line) and :class:`WriteError` is raised."""
    path = Path(path)
    data = text.encode("utf-8")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:
        raise WriteError(path, exc) from exc
    size = None
    try:
        size = os.fstat(fd).st_size
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except OSError as exc:
        if size is not None:
            os.ftruncate(fd, size)  # frees what the partial write took; if this fails too, both errors show
        raise WriteError(path, exc) from exc
    finally:
        os.close(fd)
    return path


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
