"""The default corpus: the running Python's standard-library ``.py`` source files.

Every Python install has them, so training needs no network. Files are found under
``sysconfig.get_paths()["stdlib"]`` (the base install even inside a virtual environment),
listed in sorted relative-path order, and never read here: sizes come from ``stat`` and
contents are read on demand by :class:`mc.data.documents.DocumentSet`.

Skipped, because they are not ordinary library source or differ between machines:
third-party packages (``site-packages``, ``dist-packages``), test suites and their data
(``test``, ``tests``, ``idle_test`` -- they hold deliberately broken or odd encodings),
``__pycache__``, the build's ``config-*`` folder and ``_sysconfigdata*`` files, and symlinks.
"""
from __future__ import annotations

import os
import sysconfig
from pathlib import Path
from typing import Sequence

from mc.data.split import check_val_fraction, fingerprint, is_val

SKIP_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"})


def stdlib_root() -> Path:
    """The standard library folder of the running interpreter."""
    root = Path(sysconfig.get_paths()["stdlib"])
    if not root.is_dir():
        raise FileNotFoundError(
            f"the Python standard library folder {root} (sysconfig 'stdlib') does not exist; "
            "use data.source=files with data.files_glob pointing at your own text files")
    return root


def _skip_dir(name: str) -> bool:
    return name in SKIP_DIRS or name.startswith("config-") or name.startswith(".")


def stdlib_files(root: str | Path | None = None, max_files: int | None = None) -> list[Path]:
    """Absolute paths of the library's ``.py`` files, sorted by path relative to ``root``.

    ``max_files`` keeps the first that many (in the same sorted order) for quick runs and tests.
    Raises FileNotFoundError when ``root`` is missing and ValueError when it holds no files.
    """
    root = Path(root) if root is not None else stdlib_root()
    if not root.is_dir():
        raise FileNotFoundError(f"corpus root {root} does not exist or is not a folder")
    if max_files is not None and (not isinstance(max_files, int) or max_files <= 0):
        raise ValueError(f"max_files={max_files!r} is invalid: expected a positive integer or None")
    rel: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not _skip_dir(d)]  # prune in place: never descend
        base = Path(dirpath)
        for name in filenames:
            if not name.endswith(".py") or name.startswith("_sysconfigdata"):
                continue
            p = base / name
            if p.is_symlink() or not p.is_file():
                continue
            rel.append(p.relative_to(root).as_posix())
    rel.sort()
    if max_files is not None:
        rel = rel[:max_files]
    if not rel:
        raise ValueError(f"no .py files found under {root}; the corpus would be empty "
                         "(use data.source=files with data.files_glob instead)")
    return [root / r for r in rel]


def relative_key(path: str | Path, root: str | Path | None = None) -> str:
    """The split/fingerprint key of ``path``: POSIX path relative to ``root`` (stdlib by default)."""
    root = Path(root) if root is not None else stdlib_root()
    p = Path(path)
    try:
        return p.relative_to(root).as_posix()
    except ValueError:
        raise ValueError(f"{p} is not under the corpus root {root}; pass root= explicitly") from None


def split_files(paths: Sequence[str | Path], val_fraction: float,
                root: str | Path | None = None) -> tuple[list[Path], list[Path]]:
    """(train, val) by a stable sha256 of each path relative to ``root``; order is preserved."""
    check_val_fraction(val_fraction)
    root = Path(root) if root is not None else stdlib_root()
    train, val = [], []
    for p in paths:
        (val if is_val(relative_key(p, root), val_fraction) else train).append(Path(p))
    return train, val


def corpus_fingerprint(paths: Sequence[str | Path], root: str | Path | None = None) -> dict:
    """``{file_count, bytes, sha256}`` over (relative path, size, content) in sorted key order."""
    root = Path(root) if root is not None else stdlib_root()
    keyed = sorted((relative_key(p, root), Path(p)) for p in paths)
    return fingerprint((key, p.read_bytes()) for key, p in keyed)
