"""Construction: device resolution, the three nets, and a ready MCController from a RunConfig.

Training, the compile harness, evaluation and the benchmarks all build through here, so the
harness verdict is about the same objects the workflow trains.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch

from mc.compile.telemetry import Telemetry
from mc.config import ConfigError, RunConfig
from mc.config_checks import validate
from mc.config_loading import apply_overrides
from mc.controller import MCController
from mc.nets.gistnet import GistNet, token_embedding_rms
from mc.nets.gpt import GPT
from mc.nets.lensnet import LensNet
from mc.train.checkpoint import CheckpointError, check_finite, load_checkpoint


def resolve_device(name: str) -> torch.device:
    """``auto`` -> cuda when available, else cpu; ``cuda`` without a GPU is a :class:`ConfigError`
    (a ValueError: the workflow and the harness turn it into exit 2 at start-up)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("config train.device='cuda' is invalid here: torch sees no CUDA device; use train.device=cpu or auto")
    return torch.device(name)


def build_nets(cfg: RunConfig, device: torch.device) -> tuple[GPT, GistNet, LensNet]:
    """Fresh base GPT (or, with ``model=hf``, the loaded HF base), GistNet and LensNet on ``device`` (seeded by ``train.seed``)."""
    torch.manual_seed(cfg.train.seed)
    if cfg.model.source == "hf":  # a loaded Hugging Face causal LM (see obsidian Base models); sizes follow it
        from mc.nets.hf_load import load_hf_base  # noqa: PLC0415 - transformers only for model=hf
        base = load_hf_base(cfg.model, device)
        torch.manual_seed(cfg.train.seed)  # the aux nets' init does not depend on what loading drew
    else:
        base = GPT(cfg.model).to(device)
    content_vocab = cfg.model.vocab_size if cfg.gistnet.content_loss_weight else 0
    gistnet = GistNet(cfg.gistnet, cfg.model.d_model, cfg.mc.block_size, content_vocab=content_vocab).to(device)
    lensnet = LensNet(cfg.lensnet, cfg.model.d_model, cfg.mc.block_size, cfg.mc.max_lod).to(device)
    return base, gistnet, lensnet


def load_base_weights(base: GPT, path: str | Path) -> None:
    """Load stage-1 weights: accepts a bare state dict or a checkpoint with a ``model`` entry. A file that is
    not a checkpoint, or weights of another model shape, raise :class:`CheckpointError` in one line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"base model weights not found at {path}: run stage 1 first (bash run10.sh --stages=stage1)")
    state = load_checkpoint(path)
    if "model" in state:
        state = state["model"]
    check_finite(state, path, fix="stage 1 diverged or the file was damaged: re-run stage 1 (delete that file first)")
    try:
        base.load_state_dict(state)
    except (RuntimeError, KeyError, TypeError, AttributeError) as exc:  # size mismatch / missing keys / not tensors
        lines = [line.strip() for line in str(exc).strip().splitlines()] or [type(exc).__name__]
        detail = (lines[1] if len(lines) > 1 else lines[0])[:240] + (f" (+{len(lines) - 2} more)" if len(lines) > 2 else "")
        raise CheckpointError(f"base weights {path} do not fit this config's model ({detail}); they were trained "
                              "with another model.* config: use that run's config, or re-run stage 1") from exc


def stage1_base_path(cfg: RunConfig, run_dir: str | Path) -> Path | None:
    """Where stage 1 leaves the base weights; None with ``model=hf``, whose base is the loaded model (no stage 1)."""
    return None if cfg.model.source == "hf" else Path(run_dir) / "stage1" / "base.pt"


def build_controller(cfg: RunConfig, *, device: torch.device | None = None, base_weights: str | Path | None = None,
                     telemetry: Telemetry | None = None, run_dir: str | Path | None = None) -> MCController:
    """A controller over fresh nets (optionally the stage-1 base weights), telemetry per ``cfg.telemetry``."""
    validate(cfg)
    device = device or resolve_device(cfg.train.device)
    base, gistnet, lensnet = build_nets(cfg, device)
    if base_weights is not None:
        load_base_weights(base, base_weights)
    if cfg.gistnet.output_norm == "tokens":  # the base's own token scale, read after its weights are in place
        gistnet.set_output_rms(token_embedding_rms(base.tok_emb))
    if telemetry is None:
        telemetry = Telemetry.from_config(cfg.telemetry, run_dir, device=device)
    return MCController(cfg, base, gistnet, lensnet, device=device, telemetry=telemetry)


def load_run(run_dir: str | Path, *, device: torch.device | str | None = None, telemetry: Telemetry | None = None,
             overrides: Sequence[str] = ()):
    """A trained run folder -> ``(controller, tokenizer)`` ready for inference (see obsidian Inference).

    Reads ``<run_dir>/config.json`` (the config the workflow recorded), the stage-1 base weights
    ``stage1/base.pt`` (a ``model=hf`` run has none: its base is the model at ``model.hf_path``) and
    the stage-2 GistNet/LensNet checkpoint ``stage2/ckpt.pt``; the nets are put in eval mode and
    training compile modes are switched off (inference modes stay as recorded). The tokenizer is the
    run's own: bytes for the built-in base, the model's for ``model=hf``. ``overrides`` (``key.path=value``)
    change the recorded config before anything is built, for settings that do not touch the trained shapes
    (``compile.decode=default``, ``allocator.inference.*``); an unknown key or a bad value is a ConfigError.
    Telemetry stays in memory unless given: loading never writes into the run folder. A folder that
    is missing, lacks a file, or holds files of another shape raises a ``ValueError`` /
    ``FileNotFoundError`` whose one-line message names the file and the stage to (re)run.
    """
    import json  # noqa: PLC0415

    from mc.config import from_dict  # noqa: PLC0415
    from mc.data.hf_tokenizer import tokenizer_for  # noqa: PLC0415

    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise NotADirectoryError(f"run folder {run_dir} is a file, not a folder; pass the run folder (runs/<name>/)")
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run folder {run_dir} does not exist; train one with bash run10.sh "
                                "(runs/<name>/) and pass that folder")
    cfg_path = run_dir / "config.json"
    if not cfg_path.is_file():
        raise FileNotFoundError(f"{run_dir} is not a run folder: it has no config.json (run10.sh writes one "
                                "first); pass a folder under runs/")
    try:
        cfg = from_dict(RunConfig, json.loads(cfg_path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError) as exc:  # unreadable JSON or unknown keys: one line, the cause
        raise ConfigError(f"{cfg_path} is not a readable run config ({exc}); re-run the workflow there") from exc
    if overrides:
        try:
            cfg = apply_overrides(cfg, overrides)
        except ValueError as exc:
            raise ConfigError(f"override for {run_dir}: {exc}") from exc
    cfg.compile.lensnet.train = cfg.compile.gistnet.train = "off"  # inference only: no training graphs
    base_path = stage1_base_path(cfg, run_dir)  # None with model=hf: the base is the model itself
    needed = ((("stage1/base.pt", "stage1"),) if base_path is not None else ()) + (("stage2/ckpt.pt", "stage2"),)
    for name, stage in needed:
        if not (run_dir / name).is_file():
            raise FileNotFoundError(f"{run_dir} has no {name}: the run did not finish {stage}; run "
                                    f"bash run10.sh --name {run_dir.name} --stages={stage} (and the stages before it)")
    if device is None and cfg.train.device == "cuda" and not torch.cuda.is_available():
        device = "cpu"  # a run trained on a GPU still loads on a CPU-only machine
    ctrl = build_controller(cfg, device=torch.device(device) if device is not None else None,
                            base_weights=base_path, telemetry=telemetry or Telemetry())
    ckpt = load_checkpoint(run_dir / "stage2" / "ckpt.pt")
    check_finite(ckpt, run_dir / "stage2" / "ckpt.pt", fix="re-run stage 2 (delete that file first)")
    state = ckpt.get("controller", ckpt)
    if not isinstance(state, dict) or "gistnet" not in state or "lensnet" not in state:
        raise CheckpointError(f"{run_dir / 'stage2' / 'ckpt.pt'} holds no GistNet/LensNet state (found "
                              f"{sorted(ckpt)[:6]}); re-run stage 2")
    try:
        ctrl.load_state_dict(state)
    except (RuntimeError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0][:200]
        raise CheckpointError(f"{run_dir / 'stage2' / 'ckpt.pt'} does not fit the run's config ({first}); "
                              "re-run stage 2") from exc
    for m in (ctrl.base, ctrl.gistnet, ctrl.lensnet):
        m.eval()
    return ctrl, tokenizer_for(cfg.model)
