"""Resolve a :class:`mc.config.RunConfig` from ``configs/`` with Hydra, plus the workflow flags.

Hydra composes the YAML groups over the dataclass schema; OmegaConf type-checks every value;
``mc.config_checks.validate`` checks ranges and cross-field rules. Any failure becomes a
:class:`ConfigError` naming the key and value. :func:`apply_overrides` applies ``key.path=value`` overrides
to a config dataclass without Hydra (a recorded run's config: ``load_run``, ``mc_eval.py``, the bench). The
run10-style flags (``--mc_compile_lensnet=1`` ...) are parsed here too, so the workflow, the harness and the
tests share one parser.

Hydra is imported lazily: the library itself (and the GPU machines, which have no Hydra) only
needs the dataclasses.
"""
from __future__ import annotations

import difflib
import hashlib
import json
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Sequence

from mc.config import COMPILE_MODES, ConfigError, RunConfig, to_dict
from mc.config_checks import validate

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"

# run10.sh flag -> the config keys it switches on (set to the --compile_mode value).
COMPILE_FLAGS: dict[str, tuple[str, ...]] = {
    "mc_compile_lensnet": ("compile.lensnet.train",),
    "mc_compile_lensnet_inference": ("compile.lensnet.inference",),
    "mc_compile_gistnet": ("compile.gistnet.train", "compile.gistnet.inference"),
}
VALUE_FLAGS = ("preset", "compile_mode", "name", "stages", "force", "nproc", "stage1_from")
BOOL_VALUES = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


@dataclass
class WorkflowArgs:
    """What run10.sh / the harness were asked for, before Hydra resolves it."""

    preset: str | None = None
    compile_flags: dict[str, bool] = field(default_factory=dict)
    compile_mode: str = "reduce-overhead"
    name: str | None = None
    stages: str | None = None  # comma list of stages to run (default: all)
    force: str | None = None  # comma list of stages to redo even when their outputs exist
    nproc: int = 0  # --nproc N: stage 1/2 under torchrun on N ranks (0 = one process, no torchrun)
    stage1_from: str | None = None  # --stage1-from DIR: stage 1 is a copy of that run folder's (a controlled stage-2 change)
    overrides: list[str] = field(default_factory=list)  # Hydra key=value overrides, verbatim

    @property
    def any_compile(self) -> bool:
        return any(self.compile_flags.values())

    def hydra_overrides(self) -> list[str]:
        """Everything as Hydra overrides: preset first, then flags, then the user's own (which win)."""
        out: list[str] = []
        if self.preset:
            out.append(f"preset={self.preset}")
        if self.name:
            out.append(f"name={self.name}")
        for flag, on in self.compile_flags.items():
            if on:
                out += [f"{key}={self.compile_mode}" for key in COMPILE_FLAGS[flag]]
        return out + list(self.overrides)


def parse_workflow_args(argv: Sequence[str]) -> WorkflowArgs:
    """Parse ``--flag=V``, ``--flag V`` and ``key=value`` arguments; raise ConfigError on bad ones."""
    args = WorkflowArgs()
    items = list(argv)
    i = 0
    while i < len(items):
        item = items[i]
        i += 1
        if item.startswith("--"):
            name, eq, value = item[2:].partition("=")
            name = name.replace("-", "_")
            if name not in COMPILE_FLAGS and name not in VALUE_FLAGS:
                known = ", ".join(f"--{n}" for n in (*COMPILE_FLAGS, *VALUE_FLAGS))
                raise ConfigError(f"unknown flag --{name}; known flags: {known}, --help; "
                                  "config values go as key=value (e.g. allocator.inference.iterations=3)")
            if not eq:
                if i >= len(items) or items[i].startswith("--"):
                    raise ConfigError(f"flag --{name} needs a value (--{name}=VALUE or --{name} VALUE)")
                value = items[i]
                i += 1
            if name in COMPILE_FLAGS:
                if value.lower() not in BOOL_VALUES:
                    raise ConfigError(f"flag --{name}={value!r} is invalid: expected 1 or 0 (also true/false, yes/no, on/off)")
                args.compile_flags[name] = BOOL_VALUES[value.lower()]
            elif name == "compile_mode":
                if value not in COMPILE_MODES or value == "off":
                    allowed = ", ".join(m for m in COMPILE_MODES if m != "off")
                    raise ConfigError(f"flag --compile_mode={value!r} is invalid: expected one of {allowed}")
                args.compile_mode = value
            elif name == "nproc":
                if not value.isdigit() or int(value) < 1:
                    raise ConfigError(f"flag --nproc={value!r} is invalid: expected a positive integer (processes, one device each)")
                args.nproc = int(value)
            else:
                setattr(args, name, value)
        elif "=" in item:
            args.overrides.append(item)
        else:
            raise ConfigError(f"unexpected argument {item!r}: use --flag=VALUE or a Hydra override key=value")
    return args


def check_override_keys(overrides: Sequence[str], config_dir: Path | str = CONFIG_DIR) -> None:
    """Every override names a schema key or a config group option; else a one-line ConfigError with the
    closest key. Hydra would suggest ``+key=value`` for a typo, and a ``+key`` outside the schema is
    dropped silently when the config becomes a RunConfig: neither may pass."""
    groups = {p.name: sorted(f.stem for f in p.glob("*.yaml")) for p in Path(config_dir).iterdir() if p.is_dir()}
    for item in overrides:
        raw_key, _, value = item.partition("=")
        key = raw_key.lstrip("+~")
        if key in groups:
            if value not in groups[key] and not raw_key.startswith("~"):
                raise ConfigError(f"override {item!r}: there is no {key} {value!r}; the {key} options are "
                                  f"{', '.join(groups[key])} (configs/{key}/*.yaml)")
            continue
        node: object = RunConfig()
        parts = key.split(".")
        for depth, part in enumerate(parts):
            names = [f.name for f in fields(node)] if is_dataclass(node) else []
            if part not in names:
                where = ".".join(parts[:depth])
                close = difflib.get_close_matches(part, names, n=1)
                hint = f"did you mean {'.'.join(filter(None, (where, close[0])))}? " if close else ""
                raise ConfigError(f"override {item!r}: unknown config key {key!r}; {hint}the keys of "
                                  f"{where or 'the config'} are {', '.join(names) or '(none: it holds a value)'}")
            node = getattr(node, part)


def load_config(overrides: Sequence[str] = (), config_dir: Path | str = CONFIG_DIR) -> RunConfig:
    """Compose ``configs/config.yaml`` with ``overrides`` and return a validated RunConfig."""
    if isinstance(overrides, (str, bytes)):  # iterating "a=b" would give the overrides "a", "=", "b"
        raise ConfigError(f"load_config takes a list of 'key=value' overrides, got the string {overrides!r}; "
                          f"pass [{overrides!r}]")
    try:
        from hydra import compose, initialize_config_dir
        from hydra.core.config_store import ConfigStore
        from hydra.core.global_hydra import GlobalHydra
        from omegaconf import OmegaConf
        from omegaconf.errors import OmegaConfBaseException
    except ImportError as exc:  # pragma: no cover - exercised only where hydra is missing
        raise ConfigError("hydra-core is not installed: `pip install hydra-core` (or use mc.config.RunConfig directly)") from exc
    from hydra.errors import HydraException

    check_override_keys(overrides, config_dir)
    ConfigStore.instance().store(name="mc_schema", node=RunConfig)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(Path(config_dir).resolve()), version_base=None):
            composed = compose(config_name="config", overrides=list(overrides))
        cfg = OmegaConf.to_object(composed)
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        detail = str(exc)
        if exc.__cause__ is not None:  # Hydra wraps OmegaConf's message (which names the key and type)
            detail += f": {exc.__cause__}"
        detail = " ".join(ln.strip() for ln in detail.splitlines() if ln.strip() and not ln.startswith((" ", "\t")))
        raise ConfigError(f"could not resolve the config with overrides {list(overrides)}: {detail}") from exc
    finally:
        GlobalHydra.instance().clear()
    if cfg.model.source == "hf":  # the base's shape comes from its directory (one-line error when there is none)
        from mc.nets.hf_load import check_hf_path, sync_model_config  # noqa: PLC0415 - transformers only for model=hf
        check_hf_path(cfg.model.hf_path)
        sync_model_config(cfg.model)
    return validate(cfg)


def config_hash(cfg: RunConfig) -> str:
    """A stable short hash of the resolved config (the harness verdict is keyed on it)."""
    payload = json.dumps(to_dict(cfg), sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def compile_hash(cfg: RunConfig) -> str:
    """Hash of the parts of the config the compiled boundary depends on (not the run's name or step counts)."""
    d = to_dict(cfg)
    keep = {k: d[k] for k in ("model", "gistnet", "lensnet", "mc", "allocator", "compile")}
    keep["train"] = {"device": d["train"]["device"], "stage2_batch": d["train"]["stage2"]["batch_size"]}
    return hashlib.sha256(json.dumps(keep, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _parse_value(text: str):
    """JSON, else a single-quoted string (``''`` is empty, as in Hydra), else a Hydra-style list of bare words
    (``[focused,oracle]``), else the text itself."""
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1]
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    inner = text.strip()
    if inner.startswith("[") and inner.endswith("]") and "[" not in inner[1:-1]:
        return [_parse_value(x.strip()) for x in inner[1:-1].split(",") if x.strip()]
    return text


def apply_overrides(cfg: RunConfig, overrides: Sequence[str]) -> RunConfig:
    """``key.path=value`` overrides on a config dataclass without Hydra (values parsed as JSON,
    else kept as strings); an unknown key is a ValueError naming it."""
    for item in overrides:
        key, eq, raw = item.partition("=")
        if not eq:
            raise ValueError(f"override {item!r} must look like key.path=value")
        obj, parts = cfg, key.split(".")
        for p in parts[:-1]:
            if not hasattr(obj, p):
                raise ValueError(f"unknown config key {key!r} (no {p!r})")
            obj = getattr(obj, p)
        if not hasattr(obj, parts[-1]):
            raise ValueError(f"unknown config key {key!r}")
        old, new = getattr(obj, parts[-1]), _parse_value(raw)
        if isinstance(old, float) and isinstance(new, int):
            new = float(new)
        if isinstance(old, str) and not isinstance(new, str):
            new = raw
        setattr(obj, parts[-1], new)
    return validate(cfg)
