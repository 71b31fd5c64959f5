"""Structured configuration for every part of MegaContext, and its validation.

Plain dataclasses, so the library imports without Hydra (the GPU machines have none); Hydra
composes YAML groups from ``configs/`` on top of these schemas (see ``mc.config_loading``).
``validate(cfg)`` checks every field and raises :class:`ConfigError` naming the key, the value
and what is allowed, so a bad value stops a run at start-up rather than deep inside it.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune-no-cudagraphs")
FREEZE_MODES = ("fail", "warn", "off")
DATA_SOURCES = ("stdlib", "files", "recall")
ALLOCATOR_POLICIES = ("relative", "absolute")
LONG_TASKS = ("passkey", "multi_needle")  # mc.data.long_tasks
LONG_RANGE_VARIANTS = ("recency", "compressed", "focused", "random", "oracle")
DEVICES = ("auto", "cpu", "cuda")
GIST_POOLINGS = ("mean_mlp", "query")
BENCH_CASES = ("lensnet", "train", "tree")

# Byte-level vocabulary: ids 0..255 are bytes, then three specials.
BOS_ID, EOS_ID, PAD_ID = 256, 257, 258
BYTE_VOCAB_SIZE = 259


class ConfigError(ValueError):
    """A configuration value is invalid; the message names key, value and what is allowed."""


@dataclass
class ModelConfig:
    """The frozen base GPT (stage 1 pretrains it on LOD0 tokens)."""

    vocab_size: int = BYTE_VOCAB_SIZE  # bytes + BOS/EOS/PAD
    d_model: int = 128  # embedding width D (GistNet outputs live in this space)
    n_layers: int = 4
    n_heads: int = 4  # head_dim = d_model / n_heads, must be even for rotary
    max_seq_len: int = 512  # longest LOD0 sequence stage 1 trains on
    rope_base: float = 10000.0  # rotary base frequency
    qk_norm: bool = True  # RMS-normalise queries and keys per head


@dataclass
class GistNetConfig:
    """GistNet: K entries of one level -> one gist in the base model's embedding space."""

    d_model: int = 128  # internal width (projected from/to the base model's D)
    n_layers: int = 2
    n_heads: int = 4
    pooling: str = "mean_mlp"  # "mean_mlp" (mean + MLP residual) or "query" (learned query)


@dataclass
class LensNetConfig:
    """LensNet: a non-causal scorer over the materialised working context."""

    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4


@dataclass
class MCConfig:
    """Shape of the gist tree and the working context, and the stage-2 objective."""

    block_size: int = 32  # K: entries per gist
    max_lod: int = 2  # coarsest level of detail kept in the tree
    max_entries: int = 256  # working-context budget (entries, tokens and gists alike)
    recent_tokens: int = 64  # the last tokens that always stay LOD0
    bucket_ladder: list[int] = field(default_factory=lambda: [64, 128, 256])  # padded WC lengths
    gist_bucket_ladder: list[int] = field(default_factory=lambda: [1, 4, 16, 64])  # blocks per GistNet call (inference)
    history_tokens: int = 2048  # stage-2 training sequence length T (multiple of K**max_lod)
    n_random_variants: int = 3  # random compressions per training sequence (plus one baseline)
    lens_loss_weight: float = 1.0  # weight of the LensNet preference loss in the stage-2 total
    pref_beta: float = 2.0  # logistic sharpness of the per-entry preference loss (2: scores clear the allocator thresholds)
    min_loss_gap: float = 1e-3  # pairs whose loss gap is smaller carry no preference
    freeze_base: bool = True  # stage 2 leaves the base model frozen


@dataclass
class AllocatorInferenceConfig:
    """How often and how hard the allocator refocuses during an inference session."""

    iterations: int = 2  # allocator iterations (LensNet calls) per refocus, at most; a refocus stops early
    #                      once an iteration chooses no edit or the edit budget is spent. Reaching a token under an
    #                      LOD-L gist takes L expansions, one per iteration: give it >= max_lod iterations.
    max_edits: int = 4  # edits applied per iteration at most
    edit_budget: int = 0  # edits per refocus at most, over all its iterations (0 = iterations * max_edits)
    refocus_interval: int = 32  # tokens appended between refocuses


@dataclass
class AllocatorConfig:
    """Focus allocator: scores -> legal expand/collapse edits."""

    # "relative" (default): decisions on scores standardised within the working context (z = (s - median) / std),
    # so they do not depend on the absolute scale a training run happened to give LensNet's scores; room for an
    # expansion comes from the free budget, else from a trade with the lowest-scored sibling group.
    # "absolute": the fixed thresholds below on raw tanh scores (the first design; kept for comparison).
    policy: str = "relative"
    expand_z: float = 1.0  # relative: expand a gist whose z-score is >= this
    trade_margin_z: float = 1.0  # relative: a trade needs z(expanded) - mean z(collapsed group) >= this
    expand_threshold: float = 0.2  # absolute: expand an entry whose score >= this
    collapse_threshold: float = 0.2  # absolute: collapse K siblings whose mean score <= -this (also the trade margin)
    cooldown: int = 2  # refocuses during which a changed entry is not flipped back
    inference: AllocatorInferenceConfig = field(default_factory=AllocatorInferenceConfig)


@dataclass
class NetCompileConfig:
    """Compile mode of one net, per context."""

    train: str = "off"  # one of COMPILE_MODES
    inference: str = "off"  # one of COMPILE_MODES

    def is_on(self, context: str) -> bool:  # the one "does this net compile in context?" test
        if context not in ("train", "inference"):
            raise ValueError(f"compile context {context!r}: expected 'train' or 'inference'")
        return getattr(self, context) != "off"


@dataclass
class CompileConfig:
    """The compiled boundary: modes, warm-up, freeze and caches."""

    lensnet: NetCompileConfig = field(default_factory=NetCompileConfig)
    gistnet: NetCompileConfig = field(default_factory=NetCompileConfig)
    fullgraph: bool = True  # a graph break is an error, never a silent split
    recompile_limit: int = 0  # 0 = size it from buckets x modes (+ margin)
    warmup_iters: int = 3  # calls per (bucket x mode) in warm-up (warm-up, record, replay)
    freeze: str = "fail"  # after warm-up: "fail" = set_stance("fail_on_recompile"), "warn", "off"
    cudagraph_strict: bool = False  # cudagraph_or_error + no graph partition (harness strict mode)

    def is_on(self, context: str) -> bool:  # some net compiles in context ("train" or "inference")
        return self.lensnet.is_on(context) or self.gistnet.is_on(context)

    @property
    def any_on(self) -> bool:  # some net compiles somewhere (else all is eager and nothing needs warm-up)
        return self.is_on("train") or self.is_on("inference")


@dataclass
class RecallConfig:
    """The generated long-range recall task."""

    doc_tokens: int = 2048  # length of a document in bytes/tokens
    n_records: int = 8  # key=value records placed early in the document
    key_len: int = 4
    value_len: int = 4
    records_region: float = 0.25  # records sit in the first this-fraction of the document


@dataclass
class DataConfig:
    """Where training text comes from."""

    source: str = "stdlib"  # "stdlib", "files" (files_glob) or "recall" (generated only)
    files_glob: str = ""  # for source=files: a glob of .txt/.jsonl/.parquet files
    val_fraction: float = 0.05  # share of files (by stable path hash) held out for validation
    recall_mix: float = 0.5  # share of stage-2 sequences drawn from the recall task
    recall: RecallConfig = field(default_factory=RecallConfig)


@dataclass
class StageConfig:
    """One training stage's loop settings."""

    steps: int = 200
    batch_size: int = 8
    grad_accum: int = 1  # micro-steps per optimizer step
    lr: float = 3e-3
    weight_decay: float = 0.0
    warmup_steps: int = 20
    eval_every: int = 50
    eval_batches: int = 4
    ckpt_every: int = 50


@dataclass
class TrainConfig:
    device: str = "auto"  # "auto" (cuda when available), "cpu" or "cuda"
    seed: int = 1234
    tensorboard: bool = False  # also log the training scalars to <run>/stage{1,2}/tb/ (needs the "tb" extra)
    stage1: StageConfig = field(default_factory=StageConfig)
    stage2: StageConfig = field(default_factory=lambda: StageConfig(steps=150, batch_size=2, grad_accum=2, lr=1e-3))
    log_every: int = 1  # stage 2: optimizer steps per metrics fetch (each fetch is one host-device sync)
    prefetch: int = 2  # stage 2: micro-steps whose host work a background thread prepares ahead (0 = inline)


@dataclass
class LongRangeConfig:
    """The long-range sweep (obsidian Evaluation): passkey / multi-needle documents far past the base's window."""

    multiples: list[int] = field(default_factory=list)  # history lengths as multiples of model.max_seq_len ([] = off)
    depths: list[float] = field(default_factory=lambda: [0.1, 0.5, 0.9])  # needle depth buckets: early, middle, late
    n_per_cell: int = 8  # documents per (task, length, depth) cell
    tasks: list[str] = field(default_factory=lambda: ["passkey", "multi_needle"])  # of mc.data.long_tasks.LONG_TASKS
    n_needles: int = 4  # records in a multi_needle document (one queried, the rest distractors)
    variants: list[str] = field(default_factory=lambda: ["recency", "compressed", "focused", "random", "oracle"])


@dataclass
class EvalConfig:
    n_docs: int = 16  # held-out documents per evaluation source
    doc_tokens: int = 2048  # length of each held-out document
    tail_tokens: int = 64  # next-token loss is measured over this document tail
    long_range: LongRangeConfig = field(default_factory=LongRangeConfig)  # the sweep past the window (off by default)


@dataclass
class BenchConfig:
    """The workflow's benchmark stage (``scripts/mc_bench.py`` runs the same code standalone)."""

    enabled: bool = False  # opt-in: also run the bench stage (~80 s smoke, ~130 s cpu); --stages=...,bench does too
    modes: list[str] = field(default_factory=lambda: ["default", "reduce-overhead", "max-autotune-no-cudagraphs"])  # vs eager
    cases: list[str] = field(default_factory=lambda: ["lensnet", "train", "tree"])  # allocator call, micro-step, appends
    quick: bool = False  # tiny shapes and few repetitions instead of this config's shapes
    reps: int = 0  # timed repetitions per case (0 = the benchmark's default)


@dataclass
class TelemetryConfig:
    jsonl: bool = True  # stream events to runs/<name>/telemetry.jsonl
    debug: bool = False  # print a one-line summary per step


@dataclass
class RunConfig:
    """The root config the workflow and the harness resolve."""

    name: str = "default"  # run folder: <out_dir>/<name> (run10.sh derives it from preset + config unless given)
    out_dir: str = "runs"
    preset: str = "cpu"
    model: ModelConfig = field(default_factory=ModelConfig)
    gistnet: GistNetConfig = field(default_factory=GistNetConfig)
    lensnet: LensNetConfig = field(default_factory=LensNetConfig)
    mc: MCConfig = field(default_factory=MCConfig)
    allocator: AllocatorConfig = field(default_factory=AllocatorConfig)
    compile: CompileConfig = field(default_factory=CompileConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    bench: BenchConfig = field(default_factory=BenchConfig)


# ----------------------------------------------------------------------------- validation


def _fail(key: str, value: Any, allowed: str) -> None:
    raise ConfigError(f"config {key}={value!r} is invalid: {allowed}")


def _positive(key: str, value: Any, minimum: int = 1, note: str = "") -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        _fail(key, value, ("expected a positive integer" if minimum == 1 else f"expected an integer >= {minimum}") + note)


def _choice(key: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        _fail(key, value, f"expected one of {', '.join(choices)}")


def _unit_interval(key: str, value: Any, *, closed: bool = True) -> None:
    ok = isinstance(value, (int, float)) and (0.0 <= value <= 1.0 if closed else 0.0 < value < 1.0)
    if not ok:
        _fail(key, value, "expected a number in [0, 1]" if closed else "expected a number in (0, 1)")


def validate(cfg: RunConfig) -> RunConfig:
    """Check every field; return ``cfg`` unchanged or raise :class:`ConfigError`."""
    m = cfg.model
    for k in ("vocab_size", "d_model", "n_layers", "n_heads", "max_seq_len"):
        _positive(f"model.{k}", getattr(m, k))
    if m.d_model % m.n_heads or (m.d_model // m.n_heads) % 2:
        _fail("model.n_heads", m.n_heads, f"d_model ({m.d_model}) / n_heads must be an even integer for rotary")
    for net in ("gistnet", "lensnet"):
        n = getattr(cfg, net)
        for k in ("d_model", "n_layers", "n_heads"):
            _positive(f"{net}.{k}", getattr(n, k))
        if n.d_model % n.n_heads:
            _fail(f"{net}.n_heads", n.n_heads, f"must divide {net}.d_model ({n.d_model})")
    _choice("gistnet.pooling", cfg.gistnet.pooling, GIST_POOLINGS)

    mc = cfg.mc
    for k in ("block_size", "max_lod", "max_entries", "recent_tokens", "history_tokens"):
        _positive(f"mc.{k}", getattr(mc, k))
    _positive("mc.block_size", mc.block_size, 2, " (K entries make one gist)")
    _positive("mc.recent_tokens", mc.recent_tokens, 2, " (the shared tail must hold a next-token prediction)")
    _positive("mc.n_random_variants", mc.n_random_variants, 1, " (pairs need two variants)")
    top = mc.block_size ** mc.max_lod
    if mc.history_tokens % top:
        _fail("mc.history_tokens", mc.history_tokens, f"must be a multiple of block_size**max_lod = {top}")
    if mc.recent_tokens >= mc.max_entries:
        _fail("mc.recent_tokens", mc.recent_tokens, f"must be smaller than mc.max_entries ({mc.max_entries})")
    for key in ("bucket_ladder", "gist_bucket_ladder"):
        ladder = list(getattr(mc, key))
        if not ladder or any(not isinstance(b, int) or b <= 0 for b in ladder) or ladder != sorted(set(ladder)):
            _fail(f"mc.{key}", ladder, "expected a non-empty, strictly increasing list of positive integers")
    if mc.bucket_ladder[-1] < mc.max_entries:
        _fail("mc.bucket_ladder", list(mc.bucket_ladder), f"the largest bucket must be >= mc.max_entries ({mc.max_entries})")
    for k in ("lens_loss_weight", "pref_beta", "min_loss_gap"):
        if getattr(mc, k) < 0:
            _fail(f"mc.{k}", getattr(mc, k), "expected a number >= 0")

    al = cfg.allocator
    for k in ("expand_threshold", "collapse_threshold"):
        v = getattr(al, k)
        if not isinstance(v, (int, float)) or not 0.0 <= v < 1.0:
            _fail(f"allocator.{k}", v, "expected a number in [0, 1) (scores are tanh outputs)")
    _choice("allocator.policy", al.policy, ALLOCATOR_POLICIES)
    for k in ("expand_z", "trade_margin_z"):
        v = getattr(al, k)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v < 100.0:
            _fail(f"allocator.{k}", v, "expected a number in [0, 100) (a z-score: standard deviations of the scores)")
    _positive("allocator.cooldown", al.cooldown, 0)
    for k in ("iterations", "max_edits", "refocus_interval"):
        _positive(f"allocator.inference.{k}", getattr(al.inference, k))
    _positive("allocator.inference.edit_budget", al.inference.edit_budget, 0, " (0 = iterations * max_edits)")

    c = cfg.compile
    for net in ("lensnet", "gistnet"):
        for ctx in ("train", "inference"):
            _choice(f"compile.{net}.{ctx}", getattr(getattr(c, net), ctx), COMPILE_MODES)
    _choice("compile.freeze", c.freeze, FREEZE_MODES)
    _positive("compile.recompile_limit", c.recompile_limit, 0, " (0 = automatic)")
    if not isinstance(c.warmup_iters, int) or c.warmup_iters < 3:
        _fail("compile.warmup_iters", c.warmup_iters, "expected >= 3 (CUDA graph trees warm up, record, then replay)")

    d = cfg.data
    _choice("data.source", d.source, DATA_SOURCES)
    if d.source == "files" and not d.files_glob:
        _fail("data.files_glob", d.files_glob, "data.source=files needs a glob of .txt/.jsonl/.parquet files")
    if d.files_glob and d.source != "files":  # it would be silently ignored: stdlib/recall read no files
        _fail("data.files_glob", d.files_glob, f"is only read with data=files (data.source={d.source!r}): add data=files or drop it")
    _unit_interval("data.val_fraction", d.val_fraction, closed=False)
    _unit_interval("data.recall_mix", d.recall_mix)
    r = d.recall
    for k in ("doc_tokens", "n_records", "key_len", "value_len"):
        _positive(f"data.recall.{k}", getattr(r, k))
    _unit_interval("data.recall.records_region", r.records_region, closed=False)

    t = cfg.train
    _choice("train.device", t.device, DEVICES)
    _positive("train.log_every", t.log_every)
    _positive("train.prefetch", t.prefetch, 0, " (0 = host work inline, no thread)")
    for stage in ("stage1", "stage2"):
        s = getattr(t, stage)
        for k in ("batch_size", "grad_accum", "eval_every", "eval_batches", "ckpt_every"):
            _positive(f"train.{stage}.{k}", getattr(s, k))
        if not isinstance(s.steps, int) or s.steps < 0:
            _fail(f"train.{stage}.steps", s.steps, "expected an integer >= 0")
        if not s.lr > 0:
            _fail(f"train.{stage}.lr", s.lr, "expected a number > 0")
    b = cfg.bench
    if not b.modes or any(m not in COMPILE_MODES or m == "off" for m in b.modes):
        _fail("bench.modes", list(b.modes), f"expected a non-empty list of {', '.join(COMPILE_MODES[1:])} (eager always runs)")
    if not b.cases or any(c not in BENCH_CASES for c in b.cases):
        _fail("bench.cases", list(b.cases), f"expected a non-empty list of {', '.join(BENCH_CASES)}")
    _positive("bench.reps", b.reps, 0, " (0 = default)")
    e = cfg.eval
    for k in ("n_docs", "doc_tokens", "tail_tokens"):
        _positive(f"eval.{k}", getattr(e, k))
    if e.tail_tokens > mc.recent_tokens:
        _fail("eval.tail_tokens", e.tail_tokens, f"must be <= mc.recent_tokens ({mc.recent_tokens}) so the tail is LOD0")
    lr = e.long_range
    if any(isinstance(m, bool) or not isinstance(m, int) or m < 1 for m in lr.multiples):
        _fail("eval.long_range.multiples", list(lr.multiples), "expected positive integers (multiples of model.max_seq_len)")
    if any(not isinstance(d, (int, float)) or not 0.0 <= d <= 1.0 for d in lr.depths) or not lr.depths:
        _fail("eval.long_range.depths", list(lr.depths), "expected a non-empty list of fractions in [0, 1]")
    _positive("eval.long_range.n_per_cell", lr.n_per_cell)
    _positive("eval.long_range.n_needles", lr.n_needles)
    for key, allowed in (("tasks", LONG_TASKS), ("variants", LONG_RANGE_VARIANTS)):
        for v in getattr(lr, key):
            _choice(f"eval.long_range.{key}", v, allowed)
    if "random" in lr.variants and "focused" not in lr.variants:
        _fail("eval.long_range.variants", list(lr.variants), "'random' makes as many edits as 'focused' did: list both")
    return cfg


def to_dict(obj: Any) -> Any:
    """A plain, JSON-serialisable dict of a config dataclass (for hashing and run folders)."""
    if is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    return obj


def from_dict(cls: type, data: dict) -> Any:
    """Build a config dataclass from a (possibly partial) nested dict; unknown keys are errors."""
    known = {f.name: f for f in fields(cls)}
    kwargs = {}
    for key, value in (data or {}).items():
        if key not in known:
            raise ConfigError(f"unknown config key {cls.__name__}.{key}; known keys: {', '.join(sorted(known))}")
        default = getattr(cls(), key)
        kwargs[key] = from_dict(type(default), value) if is_dataclass(default) else value
    return cls(**kwargs)
