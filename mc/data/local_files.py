"""User text from local files given a glob: ``.txt``, ``.jsonl`` and ``.parquet``.

* ``.txt``: the whole file is one document (UTF-8; undecodable bytes become U+FFFD).
* ``.jsonl``: one JSON object per line with a string ``"text"`` field; each line is a document
  (blank lines are skipped). A bad line is an error naming the file and the line number.
* ``.parquet``: a string ``"text"`` column, one document per row, read through pyarrow (an
  optional dependency: without it the error says ``pip install pyarrow``).

Each document gets a key ``relpath`` (``.txt``) or ``relpath#N`` (line / row N, 1-based for
lines, 0-based for rows), relative to the deepest folder that holds every matched file, so the
train/val split (:mod:`mc.data.split`) is stable across machines and spreads the rows of one
big JSONL/parquet file over both splits. A glob that matches nothing, a missing path, an
unsupported file type or an empty corpus is a clear error saying how to fix it.
"""
from __future__ import annotations

import glob as _glob
import json
import os
from dataclasses import dataclass
from pathlib import Path

SUPPORTED_SUFFIXES = (".txt", ".jsonl", ".parquet")


@dataclass(frozen=True)
class TextDocument:
    key: str   # split/fingerprint identity, e.g. "books/a.jsonl#12"
    text: str


def resolve_glob(pattern: str) -> list[Path]:
    """Sorted files matched by ``pattern`` (``**`` recurses); a folder means every supported file in it."""
    if not pattern or not str(pattern).strip():
        raise ValueError("the files glob is empty; set data.files_glob, e.g. data.files_glob='data/**/*.jsonl'")
    pattern = os.path.expanduser(str(pattern))
    if os.path.isdir(pattern):
        files = sorted(p for p in Path(pattern).rglob("*") if p.is_file() and p.suffix in SUPPORTED_SUFFIXES)
        if not files:
            raise ValueError(f"folder {pattern} holds no {'/'.join(SUPPORTED_SUFFIXES)} files; "
                             "point data.files_glob at your text files")
        return files
    if not _glob.has_magic(pattern):
        if not os.path.exists(pattern):
            raise FileNotFoundError(f"data file {pattern} does not exist; check data.files_glob "
                                    f"(cwd is {os.getcwd()})")
        return [Path(pattern)]
    files = sorted(Path(p) for p in _glob.glob(pattern, recursive=True) if os.path.isfile(p))
    if not files:
        raise FileNotFoundError(f"glob {pattern!r} matched no files (cwd is {os.getcwd()}); "
                                "fix data.files_glob, e.g. 'data/**/*.txt' (quote it so the shell does not expand it)")
    bad = [p for p in files if p.suffix not in SUPPORTED_SUFFIXES]
    if bad:
        raise ValueError(f"glob {pattern!r} matched {len(bad)} unsupported file(s), e.g. {bad[0]}; supported: "
                         f"{', '.join(SUPPORTED_SUFFIXES)}. Narrow the glob, e.g. '{Path(pattern).parent}/*.jsonl'")
    return files


def _import_parquet():
    """``pyarrow.parquet``, or ImportError telling the user how to install it."""
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise ImportError("reading .parquet files needs pyarrow, which is not installed: "
                          "pip install pyarrow (or convert the data to .jsonl with a 'text' field)") from e
    return pq


def read_txt(path: Path) -> list[str]:
    return [path.read_bytes().decode("utf-8", errors="replace")]


def read_jsonl(path: Path) -> list[tuple[int, str]]:
    """(line number, text) per non-blank line."""
    out = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: invalid JSON ({e.msg}); each line must be a JSON object "
                                 "with a string 'text' field") from e
            if not isinstance(obj, dict) or "text" not in obj:
                raise ValueError(f"{path}:{lineno}: no 'text' field; each line must be a JSON object like "
                                 '{"text": "..."}')
            if not isinstance(obj["text"], str):
                raise ValueError(f"{path}:{lineno}: 'text' is {type(obj['text']).__name__}, expected a string")
            out.append((lineno, obj["text"]))
    return out


def read_parquet(path: Path) -> list[str | None]:
    pq = _import_parquet()
    table = pq.read_table(path)
    if "text" not in table.column_names:
        raise ValueError(f"{path}: no 'text' column (columns: {', '.join(table.column_names) or 'none'}); "
                         "rename the text column to 'text'")
    values = table.column("text").to_pylist()
    for row, v in enumerate(values):
        if v is not None and not isinstance(v, str):
            raise ValueError(f"{path}: row {row} of column 'text' is {type(v).__name__}, expected a string")
    return values


def _root_of(files: list[Path]) -> Path:
    parents = [str(p.resolve().parent) for p in files]
    return Path(os.path.commonpath(parents))


def load_documents(pattern: str) -> list[TextDocument]:
    """Every non-empty document of the matched files, in sorted file order then line/row order."""
    files = resolve_glob(pattern)
    root = _root_of(files)
    docs: list[TextDocument] = []
    for path in files:
        rel = path.resolve().relative_to(root).as_posix()
        if path.suffix == ".txt":
            docs.extend(TextDocument(rel, t) for t in read_txt(path) if t)
        elif path.suffix == ".jsonl":
            docs.extend(TextDocument(f"{rel}#{n}", t) for n, t in read_jsonl(path) if t)
        else:
            docs.extend(TextDocument(f"{rel}#{n}", t) for n, t in enumerate(read_parquet(path)) if t)
    if not docs:
        raise ValueError(f"glob {pattern!r} matched {len(files)} file(s) but they hold no text "
                         "(empty files, or empty 'text' fields); add data or fix data.files_glob")
    return docs


def load_texts(pattern: str) -> list[str]:
    """Just the texts of :func:`load_documents`."""
    return [d.text for d in load_documents(pattern)]
