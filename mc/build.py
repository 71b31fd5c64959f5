"""Construction: device resolution, the three nets, and a ready MCController from a RunConfig.

Training, the compile harness, evaluation and the benchmarks all build through here, so the
harness verdict is about the same objects the workflow trains.
"""
from __future__ import annotations

from pathlib import Path

import torch

from mc.compile.telemetry import Telemetry
from mc.config import ConfigError, RunConfig
from mc.config_checks import validate
from mc.controller import MCController
from mc.nets.gistnet import GistNet
from mc.nets.gpt import GPT
from mc.nets.lensnet import LensNet
from mc.train.checkpoint import CheckpointError, load_checkpoint


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
    gistnet = GistNet(cfg.gistnet, cfg.model.d_model, cfg.mc.block_size).to(device)
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
    if telemetry is None:
        telemetry = Telemetry.from_config(cfg.telemetry, run_dir, device=device)
    return MCController(cfg, base, gistnet, lensnet, device=device, telemetry=telemetry)
