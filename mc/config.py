"""Structured configuration for every part of MegaContext, and its validation.

Plain dataclasses, so the library imports without Hydra (the GPU machines have none); Hydra
composes YAML groups from ``configs/`` on top of these schemas (see ``mc.config_loading``).
``mc.config_checks.validate(cfg)`` checks every field and raises :class:`ConfigError` naming the
key, the value and what is allowed, so a bad value stops a run at start-up rather than deep inside it.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Optional

from mc.config_choices import (  # noqa: F401 (re-exported: the checks and the modules read them from here)
    ALLOCATOR_POLICIES, BASE_SOURCES, BENCH_CASES, COMPILE_MODES, DATA_SOURCES, DEVICES, FREEZE_MODES, GIST_OUTPUT_NORMS, GIST_POOLINGS,
    HAYSTACKS, HF_DTYPES, INDEX_QUERIES, LONG_RANGE_VARIANTS, LONG_TASKS, POSITION_MODES, TASK_SUITE_TASKS, TASK_SUITE_VARIANTS)
from mc.config_allocator import AllocatorConfig, AllocatorInferenceConfig  # noqa: F401 (re-exported)

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
    # model=hf (obsidian Base models): a local Hugging Face causal LM; its config.json sets d_model..rope_base
    source: str = "gpt"  # "gpt" (built-in, stage 1 pretrains it) or "hf" (model.hf_path; stage 1 is skipped)
    hf_path: str = ""  # model=hf: a save_pretrained directory (config.json + weights + tokenizer); never downloaded
    hf_dtype: str = "float32"  # model=hf: weight dtype, one of HF_DTYPES (the adapter returns float32 logits)


@dataclass
class GistNetConfig:
    """GistNet: K entries of one level -> one gist in the base model's embedding space."""

    d_model: int = 128  # internal width (projected from/to the base model's D)
    n_layers: int = 2
    n_heads: int = 4
    pooling: str = "mean_mlp"  # "mean_mlp" (mean + MLP residual) or "query" (learned query)
    # Stage 2: weight of the content loss, a linear head on every gist predicting which vocabulary items occur in its
    # span (multi-label), so coarse gists keep rare tokens such as a record's key (0 = off; obsidian GistNet)
    content_loss_weight: float = 0.0
    # "free": a gist's scale is whatever training makes it; "tokens": every gist RMS-normalised to the mean RMS of the
    # base's token embeddings (over SmolLM2 free gists grew to ~19x a token's norm, but trained beside token-scale gists
    # LensNet located worse on two seeds, so no preset sets it; obsidian GistNet, "Output norm")
    output_norm: str = "free"


@dataclass
class LensNetConfig:
    """LensNet: a non-causal scorer over the materialised working context."""

    d_model: int = 128  # width; n_layers bidirectional blocks of n_heads heads
    n_layers: int = 2
    n_heads: int = 4
    query_match: bool = False  # add <q(h_last), k(h_entry)> / sqrt(d) to each logit, h_last: last real entry's state
    token_index: int = 0  # key width of the token index, 0 = off (mc.nets.token_index; obsidian LensNet, "Token index")
    index_window: int = 8  # tokens per key window (the record key and its separator fit in it)
    index_query: str = "pooled"  # INDEX_QUERIES: "pooled" (own projection), "twin" (keys', newest window first) or
    #   "lexical" (exact token identity with the question, no learned keys: mc.nets.lexical_match) or "overlap"
    #   (the same ids, a node scored by the sum over the distinct asked ids under it of 1 / their count)


@dataclass
class MCConfig:
    """Shape of the gist tree and the working context, and the stage-2 objective."""

    block_size: int = 32  # K: entries per gist
    max_lod: int = 2  # levels of detail trained on; an inference session starts here and adds levels as it grows
    max_entries: int = 256  # working-context budget (entries, tokens and gists alike)
    recent_tokens: int = 64  # the last tokens that always stay LOD0
    # entries an inference session keeps free for focus: it adds a gist level (oldest top gists merge K to one) while
    # the coarsest layout leaves fewer free; 0 = only when the history does not fit (obsidian Working Context)
    focus_room: int = 0
    bucket_ladder: list[int] = field(default_factory=lambda: [64, 128, 256])  # padded WC lengths
    gist_bucket_ladder: list[int] = field(default_factory=lambda: [1, 4, 16, 64])  # blocks per GistNet call (inference)
    history_tokens: int = 2048  # stage-2 training sequence length T (multiple of K**max_lod); validation reads this one
    # stage-2 lengths a micro-step draws one of, uniformly (repeat one to weight it): multiples of K**max_lod,
    # <= history_tokens, eager training only. [] = history_tokens always (obsidian Training, "History mix")
    history_mix: list[int] = field(default_factory=list)
    n_random_variants: int = 3  # random compressions per training sequence (plus one baseline)
    # Of those, on recall sequences: the queried record's path expanded first (capped at n_random_variants). 0 = off
    guided_variants: int = 0
    # Of those, after the guided ones, on recall sequences with other records: another record's path expanded first
    # (focus gone wrong). guided_variants + decoy_variants <= n_random_variants. 0 = off (obsidian Variant Sampler)
    decoy_variants: int = 0
    focus_loss_weight: float = 0.0  # recall sequences: weight of the loss ranking the record's gist first (0 = off)
    index_loss_weight: float = 0.0  # recall sequences: the token index's match put on the queried record (0 = off)
    lens_loss_weight: float = 1.0  # weight of the LensNet preference loss in the stage-2 total
    # KL from the base over the whole raw history to each variant on the shared tail (0 = off; needs history_tokens
    # <= model.max_seq_len): a dense target for GistNet, one no-grad forward per sequence (obsidian Training)
    distill_weight: float = 0.0
    # LensNet's losses also train GistNet (the gists LensNet reads are not detached), so GistNet keeps in its coarse
    # gists what LensNet needs to rank them, e.g. a record's key (obsidian GistNet, "What trains GistNet")
    lens_trains_gist: bool = False
    pref_beta: float = 2.0  # logistic sharpness of the per-entry preference loss (2: scores clear the allocator thresholds)
    min_loss_gap: float = 1e-3  # pairs whose loss gap is smaller carry no preference
    freeze_base: bool = True  # stage 2 leaves the base model frozen
    # base-model positions (POSITION_MODES; obsidian Positions): "bounded" ("global" inside model.max_seq_len, mapped
    # into it past it), "entries" (as bounded, older entries one apart), "slots" (entry index) or "global" (centres)
    positions: str = "bounded"


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
    decode: str = "off"  # the base model's one-entry KV-cache decode step (one of COMPILE_MODES; obsidian Inference)
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
    n_records: int = 8  # records (KEY=VALUE, or another template) placed early in the document
    key_len: int = 4
    value_len: int = 4
    records_region: float = 0.25  # records sit in the first this-fraction of the document
    stage1_min_tokens: int = 0  # stage 1: > 0 = recall rows of a random length in [this, max_seq_len], then filler
    stage2_records_region: float = 0.0  # stage 2 only: > 0 replaces records_region (records anywhere in a history)
    stage2_n_records: int = 0  # stage 2 only: > 0 replaces n_records (one queried among several: match the key)
    # Stage 1 only: weight of an extra loss on the recall rows' query tokens (key, separator, answer), added to the
    # next-token loss so the base learns the key copy too; 0 = off (obsidian Training, "Query loss").
    stage1_query_weight: float = 0.0
    haystack: str = "words"  # filler (obsidian Data): "words" (lowercase pseudo-text) or "corpus" (train / val split)
    # Record templates, "{k}" then "{v}" at the end, each document draws one; "{s}" between them is a separator drawn
    # per document (mc.data.haystack.draw_separator). The query repeats the text up to "{v}".
    templates: list[str] = field(default_factory=lambda: ["{k}={v}"])
    eval_template: str = ""  # a template never trained on: the sweep also runs each task with it ("" = none)
    key_lens: list[int] = field(default_factory=list)  # key lengths training draws from ([] = key_len only)
    near_decoys: bool = False  # the other records' keys differ from the queried key in exactly one letter
    form: str = "record"  # "record": the templates above; "sentence": English sentences (mc.data.sentence_recall)


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
class Stage1Config(StageConfig):
    """Stage 1's loop, with a gate on the recall copy (obsidian Training, "Stage-1 copy gate")."""

    # > 0: when the validation query loss at `steps` is above this, stage 1 trains on (a warm restart at half the
    # peak lr, cosine down to the cap) and stops at the first measurement at or below it; 0 = stop at `steps`
    query_loss_target: float = 0.0
    max_steps_factor: float = 2.0  # the gate's cap: stage 1 ends by steps x this (rounded down), met or not


@dataclass
class TrainConfig:
    device: str = "auto"  # "auto" (cuda when available), "cpu" or "cuda"
    seed: int = 1234
    tensorboard: bool = False  # also log the training scalars to <run>/stage{1,2}/tb/ (needs the "tb" extra)
    stage1: Stage1Config = field(default_factory=Stage1Config)
    stage2: StageConfig = field(default_factory=lambda: StageConfig(steps=150, batch_size=2, grad_accum=2, lr=1e-3))
    log_every: int = 1  # stage 2: optimizer steps per metrics fetch (each fetch is one host-device sync)
    # stage 2: micro-steps whose host work a background thread prepares ahead (0 = inline); -1 = 2 on CUDA, 0 on CPU
    # (there the thread competes with the compute for the cores; obsidian Training, "Host/device split").
    prefetch: int = -1
    # Under torchrun (--nproc): a collective waiting longer fails the run (a hung rank); > rank 0's evaluation pauses.
    dist_timeout_s: int = 600

    def __post_init__(self) -> None:  # a plain StageConfig given for stage 1 (code, tests) means the gate off
        self.stage1 = Stage1Config(**vars(self.stage1)) if type(self.stage1) is StageConfig else self.stage1


@dataclass
class LongRangeConfig:
    """The long-range sweep (obsidian Evaluation): passkey / multi-needle documents far past the base's window."""

    multiples: list[int] = field(default_factory=list)  # history lengths as multiples of model.max_seq_len ([] = off)
    depths: list[float] = field(default_factory=lambda: [0.1, 0.5, 0.9])  # needle depth buckets: early, middle, late
    # each document's needle depth is uniform in depth +- this (clipped to [0, 1]): a bucket, not one token position
    # whose alignment with the gist grid would decide the whole cell (obsidian Evaluation); 0 = the exact depth
    depth_jitter: float = 0.05
    n_per_cell: int = 8  # documents per (task, length, depth) cell
    # multiples (of `multiples`) whose cells read dense_n_per_cell documents, not n_per_cell (obsidian Evaluation)
    dense_multiples: list[int] = field(default_factory=list)
    dense_n_per_cell: int = 32  # documents per cell at dense_multiples
    tasks: list[str] = field(default_factory=lambda: ["passkey", "multi_needle"])  # of mc.data.long_tasks.LONG_TASKS
    n_needles: int = 4  # records in a multi_needle document (one queried, the rest distractors)
    variants: list[str] = field(default_factory=lambda: list(LONG_RANGE_VARIANTS))
    budget: int = 0  # entries every variant reads at (0 = mc.max_entries); the same nets, read eagerly
    workers: int = 1  # CPU processes (one thread each) the documents are split across (obsidian Evaluation)


@dataclass
class TaskSuiteConfig:
    """The task suite (obsidian Evaluation, "Task suite"): passkey and RULER-style needles over real text, for any
    tokenizer, read by every variant at the working-context budget W = ``budget`` or mc.max_entries."""

    tasks: list[str] = field(default_factory=list)  # of TASK_SUITE_TASKS ([] = off); scripts/mc_eval.py --tasks too
    multiples: list[int] = field(default_factory=lambda: [8, 16])  # history lengths as multiples of W (budget, else mc.max_entries)
    depths: list[float] = field(default_factory=lambda: [0.1, 0.5, 0.9])  # first-needle depth buckets
    depth_jitter: float = 0.05  # each document's depth uniform in depth +- this (a bucket, not one offset)
    n_per_cell: int = 4  # documents per (task, length, depth) cell
    n_keys: int = 4  # multikey: keys (one queried); multivalue: values of the one key
    hops: int = 4  # vartrack: assignments after the first (a chain of hops + 1 variables)
    variants: list[str] = field(default_factory=lambda: list(TASK_SUITE_VARIANTS))
    budget: int = 0  # entries the suite reads at, W of its multiples (0 = mc.max_entries); the same nets, read eagerly


@dataclass
class EvalConfig:
    n_docs: int = 16  # held-out documents per evaluation source
    doc_tokens: int = 2048  # length of each held-out document
    tail_tokens: int = 64  # next-token loss is measured over this document tail
    # also read the tail token by token (*_stream_loss: each token under the layout as it stands before it,
    # recency a sliding window), as a session decodes; the chunked *_tail_loss stays (obsidian Evaluation)
    stream_tail: bool = True
    # > 0: also read each document's last session_tail tokens as a decoding session does, token by token with a
    # refocus every allocator.inference.refocus_interval tokens (*_session_loss; mc.eval.session_read); 0 = off
    session_tail: int = 0
    long_range: LongRangeConfig = field(default_factory=LongRangeConfig)  # the sweep past the window (off by default)
    tasks: TaskSuiteConfig = field(default_factory=TaskSuiteConfig)  # real-text tasks for any tokenizer (off by default)
    # documents' draw (mc.eval.draws): None = fresh per run10.sh / mc_eval.py evaluation (stated), N = draw N again
    draw_seed: Optional[int] = None


@dataclass
class BenchConfig:
    """The workflow's benchmark stage (``scripts/mc_bench.py`` runs the same code standalone)."""

    enabled: bool = False  # opt-in: also run the bench stage (~80 s smoke, ~130 s cpu); --stages=...,bench does too
    modes: list[str] = field(default_factory=lambda: ["default", "reduce-overhead", "max-autotune-no-cudagraphs"])  # vs eager
    cases: list[str] = field(default_factory=lambda: ["lensnet", "train", "tree"])  # allocator call, micro-step, appends
    quick: bool = False  # tiny shapes and few repetitions instead of this config's shapes
    reps: int = 0  # timed repetitions per case (0 = the benchmark's default)
    session_lengths: list[int] = field(default_factory=lambda: [1_000, 10_000, 100_000, 1_000_000])  # "session" case:
    #                                          history lengths N at which one append and one refocus are timed


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


def with_defaults(recorded: dict, defaults: dict | None = None) -> dict:
    """``recorded`` (a config dict a run folder or checkpoint saved) with every key it lacks filled from
    the dataclass defaults: a key added to the code later did not exist then, and the run behaved as
    its default (new fields default to the old behaviour), so it must not count as a difference."""
    defaults = to_dict(RunConfig()) if defaults is None else defaults
    if not isinstance(recorded, dict) or not isinstance(defaults, dict):
        return recorded
    out = dict(recorded)
    for k, v in defaults.items():
        out[k] = with_defaults(recorded[k], v) if k in recorded else v
    return out
