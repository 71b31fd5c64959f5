"""Tiny Hugging Face model directories for the model=hf tests, written once per test session by
scripts/make_tiny_hf.py (the same code a user runs), plus a GPT-2 directory (no rotary) for the
error tests. Needs the hf extra, which scripts/setup_env.sh installs."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_CACHE: dict[tuple, Path] = {}


def _script():
    spec = importlib.util.spec_from_file_location("make_tiny_hf", ROOT / "scripts" / "make_tiny_hf.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def tiny_hf_dir(root: Path, family: str, init_std: float = 0.02, **shape: int) -> Path:
    """A random model + BPE tokenizer under ``root`` (default 2 layers, hidden 64; ``shape``: make_tiny_hf's
    hidden/layers/heads/kv_heads), made once per session."""
    key = (str(root), family, init_std, tuple(sorted(shape.items())))
    if key not in _CACHE:
        name = "-".join([family, str(init_std), *(f"{k}{v}" for k, v in sorted(shape.items()))])
        _CACHE[key] = _script().make_tiny_hf(family, Path(root) / name, init_std=init_std, **shape)
    return _CACHE[key]


def gpt2_dir(root: Path) -> Path:
    """A tiny GPT-2 (learned absolute positions, no rotary) in save_pretrained layout."""
    from transformers import GPT2Config, GPT2LMHeadModel

    out = Path(root) / "gpt2"
    if not (out / "config.json").is_file():
        GPT2LMHeadModel(GPT2Config(vocab_size=300, n_positions=128, n_embd=32, n_layer=1, n_head=2)).save_pretrained(out)
    return out
