"""Run folders tied to their resolved config (see obsidian Runbook: "Run folders").

Owns :func:`check_run_name` (a run name is one folder name under ``out_dir``: ``--name ../x`` or
``--name a/b`` would put the run elsewhere), :func:`default_run_name` (the folder a run gets when neither ``--name`` nor ``name=`` is
given: the preset's name when the config is exactly the preset's, else ``<preset>-<hash>`` of the
config, so a different config can never land in, and skip the stages of, another run's folder),
:func:`config_diff` (the dotted keys in which two resolved configs differ) and
:func:`check_recorded_config` (a run folder whose ``config.json`` differs from the requested
config is refused, naming the keys and the two ways out, unless ``--force`` redoes every stage
those keys feed), and ``--stage1-from`` (:func:`check_stage1_source`, :func:`adopt_stage1`: another run folder's
stage 1 copied in when its config agrees on every key stage 1 reads).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable

from mc.config import ConfigError, RunConfig, to_dict, with_defaults

NOT_CONFIG = ("name", "out_dir")  # where a run lives, not what it computes
# How fast a stage runs, not what it computes (stage 2's plans are bit-identical at any prefetch depth,
# tests/test_host_overlap.py): a folder recorded with another value is neither refused nor redone.
SPEED_ONLY = ("train.prefetch",)
# The first stage whose outputs a key feeds (longest matching prefix wins); later stages depend on it
# through their inputs. Keys not listed feed "data" (the safe default: everything is redone).
FIRST_STAGE = {"preset": "report", "telemetry": "stage2", "bench": "bench", "eval": "eval", "allocator": "eval",
               "compile": "stage2", "gistnet": "stage2", "lensnet": "stage2", "mc": "stage2",
               "train.stage2": "stage2", "train.tensorboard": "stage1", "model": "stage1", "train": "stage1",
               "data": "data"}


# Data keys stage 1 never reads (stage 2's records layout): another run's stage 1 serves whatever their values.
STAGE2_DATA_KEYS = ("data.recall.stage2_records_region", "data.recall.stage2_n_records")
STAGE1_FILES = ("config.json", "stage1/base.pt", "stage1/summary.json")


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else k))
    return out


def config_payload(cfg: RunConfig | dict) -> dict:
    """The resolved config as a dict, without the keys that only say where the run lives."""
    d = dict(cfg) if isinstance(cfg, dict) else to_dict(cfg)
    return {k: v for k, v in d.items() if k not in NOT_CONFIG}


def config_diff(old: dict, new: dict) -> list[str]:
    """Dotted keys whose values differ between two config dicts (``name``/``out_dir`` and :data:`SPEED_ONLY` keys
    ignored). A key a side lacks (e.g. added to the code after ``old`` was recorded) counts as its default
    (:func:`mc.config.with_defaults`)."""
    a, b = _flat(config_payload(with_defaults(old))), _flat(config_payload(with_defaults(new)))
    return sorted(k for k in set(a) | set(b) if a.get(k, "<missing>") != b.get(k, "<missing>") and k not in SPEED_ONLY)


def first_stage(key: str) -> str:
    """The earliest stage whose outputs depend on the dotted config ``key``."""
    best = max((p for p in FIRST_STAGE if key == p or key.startswith(p + ".")), key=len, default=None)
    return FIRST_STAGE[best] if best else "data"


def check_run_name(name: str) -> str:
    """``name`` when it is one plain folder name; else a one-line ConfigError (exit 2) saying what a name may be."""
    seps = [sep for sep in (os.sep, os.altsep, "/") if sep]
    if not name or name in (".", "..") or any(sep in name for sep in seps) or "\0" in name:
        raise ConfigError(f"run name {name!r} is invalid: it names one folder under out_dir (runs/), so it must be "
                          "non-empty, not '.' or '..', and without '/'; e.g. --name=my-run (to put runs "
                          "elsewhere, set out_dir=DIR)")
    return name


def default_run_name(cfg: RunConfig, preset_cfg: Callable[[str], RunConfig]) -> str:
    """``<preset>`` when ``cfg`` equals the bare preset's config (``preset_cfg(preset)``), else
    ``<preset>-<8 hex of the config hash>``: equal configs share a folder, different ones never do."""
    payload = config_payload(cfg)
    if config_payload(preset_cfg(cfg.preset)) == payload:
        return cfg.preset
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:8]
    return f"{cfg.preset}-{digest}"


def read_recorded(run_dir: Path) -> dict | None:
    """The ``config.json`` a previous run recorded in ``run_dir`` (None: a fresh folder)."""
    path = run_dir / "config.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path} is unreadable ({exc}); delete it, or pick another folder with --name") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} holds no config dict; delete it, or pick another folder with --name")
    return data


def check_recorded_config(cfg: RunConfig, run_dir: Path, force: set[str], stages: tuple[str, ...]) -> list[str]:
    """Refuse (ConfigError) a run folder recorded with another config unless ``force`` redoes every
    stage the differing keys feed; returns the differing keys (empty: same config or a fresh folder).

    ``force`` redoes its stages and every later one, so it covers key k when it names a stage at or
    before ``first_stage(k)``.
    """
    old = read_recorded(run_dir)
    if old is None:
        return []
    diff = config_diff(old, to_dict(cfg))
    if not diff:
        return []
    order = {s: i for i, s in enumerate(stages)}
    earliest = min((order[s] for s in force if s in order), default=len(stages))
    uncovered = [k for k in diff if order[first_stage(k)] < earliest]
    if uncovered:
        need = stages[min(order[first_stage(k)] for k in uncovered)]
        raise ConfigError(f"run folder {run_dir} holds a run with another config: {_shown(diff, old, cfg)}; its "
                          f"outputs would be mixed with this config's. Either pick a separate folder with --name=NEW (or drop "
                          f"--name/name= to get one named after the config), or redo the affected stages there "
                          f"with --force={need} (--force=all redoes everything)")
    return diff


def _shown(keys: list[str], old: dict, cfg: RunConfig) -> str:
    """``key (old -> new)`` for the first six differing ``keys``, then how many more."""
    a, b = _flat(old), _flat(to_dict(cfg))
    return (", ".join(f"{k} ({_short(a.get(k))} -> {_short(b.get(k))})" for k in keys[:6])
            + (f" and {len(keys) - 6} more" if len(keys) > 6 else ""))


def _short(v: Any) -> str:
    text = json.dumps(v, default=str) if v is not None else "unset"
    return text if len(text) <= 40 else text[:37] + "..."


def check_stage1_source(cfg: RunConfig, source: Path) -> None:
    """``--stage1-from``: ``source`` is a run folder with a finished stage 1 trained on what this config's stage 1
    would train on (every key that feeds the data or stage 1 equal, but :data:`STAGE2_DATA_KEYS`); else a one-line
    ConfigError naming what is missing or which keys differ."""
    if cfg.model.source == "hf":
        raise ConfigError("--stage1-from: a model=hf run has no stage 1 (the loaded model is the base); drop the flag")
    missing = [f for f in STAGE1_FILES if not (source / f).is_file()]
    if missing:
        raise ConfigError(f"--stage1-from={source}: no finished stage 1 there (missing {', '.join(missing)}); finish "
                          "that run's stage 1 or name another run folder")
    old = read_recorded(source)
    bad = [k for k in config_diff(old, to_dict(cfg)) if first_stage(k) in ("data", "stage1") and k not in STAGE2_DATA_KEYS]
    if bad:
        raise ConfigError(f"--stage1-from={source}: its stage 1 was trained on another config: {_shown(bad, old, cfg)}; "
                          "only keys that feed stage 2 and later may differ")


def adopt_stage1(source: Path, run_dir: Path) -> dict:
    """The stage-1 runner under ``--stage1-from``: copies ``source/stage1`` (base, checkpoint, metrics) into
    ``run_dir/stage1`` and returns its summary with ``adopted_from`` (the workflow writes it as the summary)."""
    shutil.copytree(source / "stage1", run_dir / "stage1", dirs_exist_ok=True)
    summary = json.loads((source / "stage1" / "summary.json").read_text(encoding="utf-8"))
    return dict(summary, adopted_from=str(source.resolve()))
