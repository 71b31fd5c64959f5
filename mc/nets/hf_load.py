"""Loading a Hugging Face causal LM directory as the base (``model=hf``), and syncing ``model.*`` with it.

Owns: the path checks (one-line errors for a missing path, a directory without a model, a model
that is not a causal LM), :func:`sync_model_config` (``model.d_model`` / ``n_layers`` / ``n_heads``
/ ``vocab_size`` / ``rope_base`` come from the directory's config.json, so GistNet and LensNet are
sized to the base's hidden size) and :func:`load_hf_base` (weights -> :class:`mc.nets.hf_base.HFBase`).
Nothing is downloaded: ``from_pretrained`` runs with ``local_files_only``. transformers is imported
lazily, so the library imports without the ``hf`` extra. See obsidian Base models.
"""
from __future__ import annotations

from pathlib import Path

import torch

from mc.config import HF_DTYPES, ModelConfig
from mc.nets.hf_base import HFBase, HFBaseError

__all__ = ["check_hf_path", "sync_model_config", "load_hf_base"]


def _transformers():
    try:
        import transformers
    except ImportError as exc:
        raise HFBaseError("model=hf needs transformers: install the hf extra (pip install -e '.[hf]'; "
                          "scripts/setup_env.sh does by default)") from exc
    return transformers


def check_hf_path(path: str) -> Path:
    """``model.hf_path`` as a directory holding a config.json; HFBaseError naming the path otherwise."""
    if not path:
        raise HFBaseError("config model.hf_path='' is invalid: model=hf needs model.hf_path=DIR, a local directory "
                          "saved with save_pretrained (scripts/make_tiny_hf.py writes a tiny one)")
    p = Path(path).expanduser()
    if not p.exists():
        raise HFBaseError(f"config model.hf_path={path!r} does not exist: give a local model directory (nothing is downloaded)")
    if not p.is_dir() or not (p / "config.json").is_file():
        raise HFBaseError(f"config model.hf_path={path!r} holds no model: expected a directory with config.json and "
                          "weights (the save_pretrained layout)")
    return p


def _hf_config(path: str):
    p = check_hf_path(path)
    try:
        return _transformers().AutoConfig.from_pretrained(str(p), local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise HFBaseError(f"config model.hf_path={path!r}: its config.json is not a model transformers knows ({first})") from exc


def sync_model_config(m: ModelConfig) -> ModelConfig:
    """Set the base's shape fields of ``m`` from the directory's config (idempotent); returns ``m``.
    ``model.max_seq_len`` stays as configured (the window the workflow uses) but must fit the model's positions."""
    c = _hf_config(m.hf_path)
    rope = dict(getattr(c, "rope_parameters", None) or {})
    theta = rope.get("rope_theta", getattr(c, "rope_theta", None))
    if theta is None:
        raise HFBaseError(f"{type(c).__name__} at model.hf_path={m.hf_path!r} has no rope_theta: model=hf needs a rotary "
                          "model (Llama, Qwen2, Mistral families; see obsidian Base models)")
    m.d_model, m.n_layers = int(c.hidden_size), int(c.num_hidden_layers)
    m.n_heads, m.vocab_size, m.rope_base = int(c.num_attention_heads), int(c.vocab_size), float(theta)
    limit = getattr(c, "max_position_embeddings", None)
    if limit is not None and m.max_seq_len > int(limit):
        raise HFBaseError(f"config model.max_seq_len={m.max_seq_len} exceeds the model's max_position_embeddings "
                          f"({limit}) at {m.hf_path}: lower model.max_seq_len")
    return m


def load_hf_base(m: ModelConfig, device: torch.device) -> HFBase:
    """The frozen adapter over the causal LM at ``m.hf_path`` (dtype ``m.hf_dtype``) on ``device``."""
    if m.hf_dtype not in HF_DTYPES:
        raise HFBaseError(f"config model.hf_dtype={m.hf_dtype!r} is invalid: expected one of {', '.join(HF_DTYPES)}")
    sync_model_config(m)
    tf = _transformers()
    try:
        model = tf.AutoModelForCausalLM.from_pretrained(str(check_hf_path(m.hf_path)), dtype=getattr(torch, m.hf_dtype),
                                                        local_files_only=True, attn_implementation="sdpa")
    except (OSError, ValueError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:240]
        raise HFBaseError(f"model.hf_path={m.hf_path!r} could not be loaded as a causal LM ({first})") from exc
    return HFBase(model, m).to(device)
