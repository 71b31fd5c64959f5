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


def other_family_dir(root: Path, family: str) -> Path:
    """A tiny random model of an architecture the adapter does not reproduce, with a tokenizer:
    ``granite`` with non-unit embedding/residual/attention multipliers and logits scaling (as released
    Granite checkpoints have), ``cohere`` (interleaved rotary, logit scale), ``llama3`` (a Llama with
    Llama-3.1's scaled rotary) or ``partial`` (StableLM rotating a quarter of each head)."""
    import torch
    import transformers as tf

    out = Path(root) / f"other-{family}"
    if (out / "config.json").is_file():
        return out
    tokenizer = _script().build_tokenizer(384)
    common = dict(vocab_size=448, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=4096, tie_word_embeddings=False,
                  bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                  pad_token_id=tokenizer.pad_token_id)
    if family == "granite":
        config = tf.GraniteConfig(embedding_multiplier=12.0, residual_multiplier=0.22, attention_multiplier=0.0078125,
                                  logits_scaling=8.0, **common)
    elif family == "cohere":
        config = tf.CohereConfig(logit_scale=0.0625, **common)
    elif family == "llama3":
        config = tf.LlamaConfig(rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                                 "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                 "original_max_position_embeddings": 1024}, **common)
    elif family == "partial":
        config = tf.StableLmConfig(partial_rotary_factor=0.25, **common)
    else:
        raise ValueError(f"unknown family {family!r}")
    torch.manual_seed(0)
    tf.AutoModelForCausalLM.from_config(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
