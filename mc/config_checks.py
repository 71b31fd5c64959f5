"""Config validation: every invalid value fails at start-up with one line naming the key and the fix.

:func:`validate` checks a resolved :class:`mc.config.RunConfig` (ranges, choices, cross-field rules);
the dataclasses and their defaults live in :mod:`mc.config`.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from mc.config import (ALLOCATOR_POLICIES, BASE_SOURCES, BENCH_CASES, HF_DTYPES, COMPILE_MODES, DATA_SOURCES, DEVICES, FREEZE_MODES,
                       GIST_OUTPUT_NORMS, GIST_POOLINGS, HAYSTACKS, LONG_RANGE_VARIANTS, LONG_TASKS, POSITION_MODES, TASK_SUITE_TASKS,
                       TASK_SUITE_VARIANTS, ConfigError, RunConfig)
from mc.config_choices import INDEX_QUERIES, RECALL_FORMS

def _fail(key: str, value: Any, allowed: str) -> None:
    raise ConfigError(f"config {key}={value!r} is invalid: {allowed}")


def _loss_weight(key: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1e3:
        _fail(key, value, "expected a number >= 0 (0 = off)")


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


def _check_copy_gate(cfg: RunConfig) -> None:
    """``train.stage1.query_loss_target`` / ``max_steps_factor``: the stage-1 copy gate (mc.train.stage1)."""
    s1 = cfg.train.stage1
    _loss_weight("train.stage1.query_loss_target", s1.query_loss_target)
    f = s1.max_steps_factor
    if isinstance(f, bool) or not isinstance(f, (int, float)) or not 1.0 <= f <= 100.0:
        _fail("train.stage1.max_steps_factor", f, "expected a number in [1, 100] (the copy gate's cap, x steps)")
    if not s1.query_loss_target:
        return
    if int(s1.steps * f) <= s1.steps:
        _fail("train.stage1.max_steps_factor", f, f"leaves the copy gate no step past train.stage1.steps ({s1.steps}): "
              "raise it (e.g. 2.0) or set train.stage1.query_loss_target=0")
    if cfg.data.source != "recall" and not cfg.data.recall_mix:
        _fail("train.stage1.query_loss_target", s1.query_loss_target, "measures the recall rows' query loss, and "
              "data.recall_mix=0 gives stage 1 none: set data.recall_mix > 0 or the target to 0")


def validate(cfg: RunConfig) -> RunConfig:
    """Check every field; return ``cfg`` unchanged or raise :class:`ConfigError`."""
    m = cfg.model
    for k in ("vocab_size", "d_model", "n_layers", "n_heads", "max_seq_len"):
        _positive(f"model.{k}", getattr(m, k))
    _choice("model.source", m.source, BASE_SOURCES)
    _choice("model.hf_dtype", m.hf_dtype, HF_DTYPES)
    if m.source == "hf":
        from mc.nets.hf_load import check_hf_path  # noqa: PLC0415 - only model=hf needs it
        check_hf_path(m.hf_path)  # one line naming the path when it is missing or holds no model
        if not cfg.mc.freeze_base:
            _fail("mc.freeze_base", cfg.mc.freeze_base, "model=hf is a frozen reader: keep mc.freeze_base=true")
    elif m.hf_path:  # it would be silently ignored by the built-in base
        _fail("model.hf_path", m.hf_path, "is only read with model=hf (model.source=hf): add model=hf or drop it")
    elif m.d_model % m.n_heads or (m.d_model // m.n_heads) % 2:
        _fail("model.n_heads", m.n_heads, f"d_model ({m.d_model}) / n_heads must be an even integer for rotary")
    for net in ("gistnet", "lensnet"):
        n = getattr(cfg, net)
        for k in ("d_model", "n_layers", "n_heads"):
            _positive(f"{net}.{k}", getattr(n, k))
        if n.d_model % n.n_heads:
            _fail(f"{net}.n_heads", n.n_heads, f"must divide {net}.d_model ({n.d_model})")
    _choice("gistnet.pooling", cfg.gistnet.pooling, GIST_POOLINGS)
    _choice("gistnet.output_norm", cfg.gistnet.output_norm, GIST_OUTPUT_NORMS)
    if not isinstance(cfg.lensnet.query_match, bool):
        _fail("lensnet.query_match", cfg.lensnet.query_match, "expected true or false")
    _positive("lensnet.token_index", cfg.lensnet.token_index, 0, " (0 = off)")
    _positive("lensnet.index_window", cfg.lensnet.index_window, 1, " (tokens per key window)")
    _choice("lensnet.index_query", cfg.lensnet.index_query, INDEX_QUERIES)
    w = cfg.gistnet.content_loss_weight
    _loss_weight("gistnet.content_loss_weight", w)
    if w and m.source == "hf":  # its head is [D, vocab]: with a 32k-150k vocabulary the targets alone are too big
        _fail("gistnet.content_loss_weight", w, "is for the built-in byte-level base only; keep 0 with model=hf")

    mc = cfg.mc
    for k in ("block_size", "max_lod", "max_entries", "recent_tokens", "history_tokens"):
        _positive(f"mc.{k}", getattr(mc, k))
    _positive("mc.block_size", mc.block_size, 2, " (K entries make one gist)")
    _positive("mc.recent_tokens", mc.recent_tokens, 2, " (the shared tail must hold a next-token prediction)")
    _positive("mc.n_random_variants", mc.n_random_variants, 1, " (pairs need two variants)")
    _positive("mc.guided_variants", mc.guided_variants, 0, " (0 = random variants only)")
    _positive("mc.decoy_variants", mc.decoy_variants, 0, " (0 = off)")
    if mc.decoy_variants and mc.guided_variants + mc.decoy_variants > mc.n_random_variants:
        _fail("mc.decoy_variants", mc.decoy_variants, f"guided_variants ({mc.guided_variants}) + decoy_variants must "
              f"be <= n_random_variants ({mc.n_random_variants}): both are kinds of the random variants")
    if not isinstance(mc.lens_trains_gist, bool):
        _fail("mc.lens_trains_gist", mc.lens_trains_gist, "expected true or false")
    _loss_weight("mc.focus_loss_weight", mc.focus_loss_weight)
    _loss_weight("mc.index_loss_weight", mc.index_loss_weight)
    if mc.index_loss_weight and not cfg.lensnet.token_index:
        _fail("mc.index_loss_weight", mc.index_loss_weight, "trains the token index: set lensnet.token_index > 0, or keep 0")
    if mc.index_loss_weight and cfg.lensnet.index_query in ("lexical", "overlap"):
        _fail("mc.index_loss_weight", mc.index_loss_weight, f"trains the token index's keys, and the "
              f"{cfg.lensnet.index_query} query has none (lensnet.index_query={cfg.lensnet.index_query}): keep 0")
    _loss_weight("mc.distill_weight", mc.distill_weight)
    if mc.distill_weight and mc.history_tokens > m.max_seq_len:
        _fail("mc.distill_weight", mc.distill_weight, f"the teacher reads the whole history in one window: needs "
              f"mc.history_tokens ({mc.history_tokens}) <= model.max_seq_len ({m.max_seq_len}); set it to 0")
    top = mc.block_size ** mc.max_lod
    if mc.history_tokens % top:
        _fail("mc.history_tokens", mc.history_tokens, f"must be a multiple of block_size**max_lod = {top}")
    mix = list(mc.history_mix)
    if any(isinstance(n, bool) or not isinstance(n, int) or n <= 0 or n % top or n > mc.history_tokens for n in mix):
        _fail("mc.history_mix", mix, f"expected stage-2 lengths that are positive multiples of block_size**max_lod = "
              f"{top} and <= mc.history_tokens ({mc.history_tokens}), or [] for history_tokens alone")
    if mix and cfg.compile.is_on("train"):
        _fail("mc.history_mix", mix, "needs eager training (compile.*.train=off): each length would be another "
              "compiled graph; use [] with a training compile mode")
    if mc.recent_tokens >= mc.max_entries:
        _fail("mc.recent_tokens", mc.recent_tokens, f"must be smaller than mc.max_entries ({mc.max_entries})")
    free = mc.max_entries - mc.recent_tokens
    if isinstance(mc.focus_room, bool) or not isinstance(mc.focus_room, int) or not 0 <= mc.focus_room <= free:
        _fail("mc.focus_room", mc.focus_room, f"expected an entry count in [0, max_entries - recent_tokens = {free}] "
              "(0 = add a gist level only when the history does not fit)")
    _choice("mc.positions", mc.positions, POSITION_MODES)
    if mc.positions == "bounded" and mc.recent_tokens >= m.max_seq_len:
        _fail("mc.recent_tokens", mc.recent_tokens, f"bounded positions keep the tail exact: must be < model.max_seq_len ({m.max_seq_len})")
    if mc.positions == "slots" and mc.max_entries > m.max_seq_len:
        _fail("mc.max_entries", mc.max_entries, f"slots positions number the entries 0..max_entries-1: must be <= model.max_seq_len "
              f"({m.max_seq_len}), or use mc.positions=entries")
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
    _positive("allocator.expand_top", al.expand_top, 0, " (0 = expand_z alone decides)")
    for k in ("expand_z", "trade_margin_z"):
        v = getattr(al, k)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v < 100.0:
            _fail(f"allocator.{k}", v, "expected a number in [0, 100) (a z-score: standard deviations of the scores)")
    _positive("allocator.cooldown", al.cooldown, 0)
    for k in ("iterations", "max_edits", "refocus_interval", "branches"):
        _positive(f"allocator.inference.{k}", getattr(al.inference, k))
    _positive("allocator.inference.edit_budget", al.inference.edit_budget, 0, " (0 = iterations * max_edits)")
    _positive("allocator.inference.branch_tail_tokens", al.inference.branch_tail_tokens)
    for k in ("edge_first", "descend_first", "branch_siblings", "branch_unchanged", "token_anchor", "anchor_path"):
        if not isinstance(getattr(al.inference, k), bool):
            _fail(f"allocator.inference.{k}", getattr(al.inference, k), "expected true or false")
    sides = al.inference.edge_sides
    if isinstance(sides, bool) or not isinstance(sides, int) or not 1 <= sides <= 64:
        _fail("allocator.inference.edge_sides", sides, "expected 1 (one side of the opened block), 2 "
              "(both) or up to 64 (then the opened run grows outward)")
    if al.inference.branch_siblings is True and (al.inference.branches < 2 or al.inference.descend_first is not True):
        _fail("allocator.inference.branch_siblings", True, "needs allocator.inference.branches >= 2 and descend_first: "
              "true (the siblings are branches, found where the zoom descends); set those or drop it")
    if al.inference.anchor_path is True and (al.inference.token_anchor is not True
                                             or al.inference.branch_unchanged is not True):
        _fail("allocator.inference.anchor_path", True, "needs allocator.inference.token_anchor: true and "
              "branch_unchanged: true (it is a candidate of the anchored zoom, weighed like the unchanged layout); "
              "set those or drop it")
    if al.inference.branch_unchanged is True and al.inference.branches < 2:
        _fail("allocator.inference.branch_unchanged", True, "needs allocator.inference.branches >= 2 (the unchanged "
              "layout is kept by the branches' rule); set branches or drop it")
    _positive("allocator.inference.branch_lookahead", al.inference.branch_lookahead, 0, " (0 = off)")
    _positive("allocator.inference.suffix_guard", al.inference.suffix_guard, 0, " (0 = off; else the shortest match in tokens)")
    _positive("allocator.inference.branch_max_tokens", al.inference.branch_max_tokens, 0, " (0 = any length)")
    for key in ("scheduled_margin", "prompt_margin"):
        sm = getattr(al.inference, key)
        if isinstance(sm, bool) or not isinstance(sm, (int, float)) or not 0 <= sm < float("inf"):
            _fail(f"allocator.inference.{key}", sm, "expected a finite number of nats >= 0 (0 = off)")
        if sm > 0 and (al.inference.branch_unchanged is not True or al.inference.branches < 2):
            _fail(f"allocator.inference.{key}", sm, "needs allocator.inference.branch_unchanged: true and "
                  "branches >= 2 (it is a margin for the unchanged layout's candidacy); set those or 0")
    _positive("allocator.inference.refocus_check", al.inference.refocus_check, 0, " (0 = off)")
    rc = al.inference.refocus_check
    if rc and not rc < cfg.mc.recent_tokens:
        _fail("allocator.inference.refocus_check", rc, f"must be smaller than mc.recent_tokens ({cfg.mc.recent_tokens}):"
              " the checked tokens and the one before them must lie in the LOD0 tail; use fewer tokens or 0 (off)")
    if rc and rc > al.inference.refocus_interval:
        _fail("allocator.inference.refocus_check", rc, f"must be at most allocator.inference.refocus_interval "
              f"({al.inference.refocus_interval}): a refocus is checked before the next one; use fewer tokens or 0 (off)")
    if al.inference.branch_max_tokens and al.inference.branches < 2:
        _fail("allocator.inference.branch_max_tokens", al.inference.branch_max_tokens, "needs allocator.inference."
              "branches >= 2 (it says which sessions branch); set branches or use 0")
    if al.inference.branch_lookahead and al.inference.branches < 2:
        _fail("allocator.inference.branch_lookahead", al.inference.branch_lookahead, "needs allocator.inference."
              "branches >= 2 (it scores the candidate layouts of a branched refocus); set branches or use 0")
    bm = al.inference.branch_margin
    if isinstance(bm, bool) or not isinstance(bm, (int, float)) or not 0.0 <= bm < 1e6:
        _fail("allocator.inference.branch_margin", bm, "expected a number of nats >= 0")
    if al.inference.branches > 1 and al.inference.branch_tail_tokens >= cfg.mc.recent_tokens:
        _fail("allocator.inference.branch_tail_tokens", al.inference.branch_tail_tokens,
              f"must be smaller than mc.recent_tokens ({cfg.mc.recent_tokens}): the scored tokens and the one before "
              "them must lie in the LOD0 tail")

    c = cfg.compile
    for net in ("lensnet", "gistnet"):
        for ctx in ("train", "inference"):
            _choice(f"compile.{net}.{ctx}", getattr(getattr(c, net), ctx), COMPILE_MODES)
    _choice("compile.freeze", c.freeze, FREEZE_MODES)
    _choice("compile.decode", c.decode, COMPILE_MODES)
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
    _positive("data.recall.stage1_min_tokens", r.stage1_min_tokens, 0, " (0 = full-length stage-1 recall rows)")
    if r.stage2_records_region:
        _unit_interval("data.recall.stage2_records_region", r.stage2_records_region, closed=False)
    _positive("data.recall.stage2_n_records", r.stage2_n_records, 0, " (0 = n_records in stage 2 too)")
    q = r.stage1_query_weight
    if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0.0 <= q < 1e3:
        _fail("data.recall.stage1_query_weight", q, "expected a number >= 0 (0 = off)")
    _choice("data.recall.haystack", r.haystack, HAYSTACKS)
    _choice("data.recall.form", r.form, RECALL_FORMS)
    if r.form == "sentence":
        from mc.data.sentence_recall import check_sentence_config  # noqa: PLC0415 (mc.data imports mc.config)
        try:
            check_sentence_config(r)
        except ValueError as e:
            _fail("data.recall.form", r.form, str(e))
    if r.haystack == "corpus" and d.source == "recall":
        _fail("data.recall.haystack", r.haystack, "needs a corpus to cut filler from; data.source=recall has none "
              "(use data.source=stdlib or files, or data.recall.haystack=words)")
    if not r.templates:
        _fail("data.recall.templates", list(r.templates), "expected at least one record template, e.g. ['{k}={v}']")
    from mc.data.haystack import check_template  # noqa: PLC0415 (mc.data imports mc.config)
    for key, tpls in (("data.recall.templates", list(r.templates)),
                      ("data.recall.eval_template", [r.eval_template] if r.eval_template else [])):
        for tpl in tpls:
            try:
                check_template(tpl)
            except ValueError as e:
                _fail(key, tpl, str(e))
    if r.eval_template and r.eval_template in r.templates:
        _fail("data.recall.eval_template", r.eval_template, "is also in data.recall.templates; a held-out template "
              "must not be trained on")
    if "{s}" in r.eval_template:
        _fail("data.recall.eval_template", r.eval_template, "holds {s} (a drawn separator); a held-out template is "
              "one fixed record shape, e.g. '{k} is {v}'")
    for kl in r.key_lens:
        _positive("data.recall.key_lens", kl)
    if r.stage1_min_tokens:
        if r.stage1_min_tokens > cfg.model.max_seq_len:
            _fail("data.recall.stage1_min_tokens", r.stage1_min_tokens,
                  f"expected <= model.max_seq_len ({cfg.model.max_seq_len}), the stage-1 row length")
        from mc.data.recall import check_recall_config  # noqa: PLC0415 (mc.data imports mc.config)
        try:
            check_recall_config(dataclasses.replace(r, doc_tokens=r.stage1_min_tokens, n_records=1))  # fewer fit: dropped
        except ValueError as e:
            _fail("data.recall.stage1_min_tokens", r.stage1_min_tokens, f"the shortest document cannot hold the task: {e}")

    t = cfg.train
    _choice("train.device", t.device, DEVICES)
    _positive("train.log_every", t.log_every)
    _positive("train.prefetch", t.prefetch, -1, " (0 = host work inline, no thread; -1 = 2 on CUDA, 0 on CPU)")
    _positive("train.dist_timeout_s", t.dist_timeout_s, 5, " (seconds; a collective waiting longer fails the run)")
    if not isinstance(t.tensorboard, bool):
        _fail("train.tensorboard", t.tensorboard, "expected true or false")
    for stage in ("stage1", "stage2"):
        s = getattr(t, stage)
        for k in ("batch_size", "grad_accum", "eval_every", "eval_batches", "ckpt_every"):
            _positive(f"train.{stage}.{k}", getattr(s, k))
        if not isinstance(s.steps, int) or s.steps < 0:
            _fail(f"train.{stage}.steps", s.steps, "expected an integer >= 0")
        if not s.lr > 0:
            _fail(f"train.{stage}.lr", s.lr, "expected a number > 0")
    _check_copy_gate(cfg)
    b = cfg.bench
    if not b.modes or any(m not in COMPILE_MODES or m == "off" for m in b.modes):
        _fail("bench.modes", list(b.modes), f"expected a non-empty list of {', '.join(COMPILE_MODES[1:])} (eager always runs)")
    if not b.cases or any(c not in BENCH_CASES for c in b.cases):
        _fail("bench.cases", list(b.cases), f"expected a non-empty list of {', '.join(BENCH_CASES)}")
    if not b.session_lengths or any(not isinstance(n, int) or isinstance(n, bool) or n < 1 for n in b.session_lengths):
        _fail("bench.session_lengths", list(b.session_lengths), "expected a non-empty list of positive integers")
    _positive("bench.reps", b.reps, 0, " (0 = default)")
    e = cfg.eval
    for k in ("n_docs", "doc_tokens", "tail_tokens"):
        _positive(f"eval.{k}", getattr(e, k))
    if e.tail_tokens > mc.recent_tokens:
        _fail("eval.tail_tokens", e.tail_tokens, f"must be <= mc.recent_tokens ({mc.recent_tokens}) so the tail is LOD0")
    _positive("eval.session_tail", e.session_tail, 0, " (0 = no session read)")
    every = cfg.allocator.inference.refocus_interval
    if e.session_tail and not every < e.session_tail < e.doc_tokens:
        _fail("eval.session_tail", e.session_tail, f"a session read needs a tail longer than "
              f"allocator.inference.refocus_interval ({every}), so that a scheduled refocus falls inside it, and "
              f"shorter than eval.doc_tokens ({e.doc_tokens}), so that a prefix is left: set it in ({every}, "
              f"{e.doc_tokens}) or 0")
    if e.draw_seed is not None and (not isinstance(e.draw_seed, int) or isinstance(e.draw_seed, bool)
                                    or not 0 <= e.draw_seed < 2 ** 31):
        _fail("eval.draw_seed", e.draw_seed, "expected null (a fresh draw per evaluation) or an integer in [0, 2^31)")
    lr = e.long_range
    if any(isinstance(m, bool) or not isinstance(m, int) or m < 1 for m in lr.multiples):
        _fail("eval.long_range.multiples", list(lr.multiples), "expected positive integers (multiples of model.max_seq_len)")
    if any(not isinstance(d, (int, float)) or not 0.0 <= d <= 1.0 for d in lr.depths) or not lr.depths:
        _fail("eval.long_range.depths", list(lr.depths), "expected a non-empty list of fractions in [0, 1]")
    jitter = lr.depth_jitter
    if isinstance(jitter, bool) or not isinstance(jitter, (int, float)) or not 0.0 <= jitter <= 0.5:
        _fail("eval.long_range.depth_jitter", jitter, "expected a number in [0, 0.5] (0 = each needle at its exact depth)")
    _positive("eval.long_range.n_per_cell", lr.n_per_cell)
    _positive("eval.long_range.dense_n_per_cell", lr.dense_n_per_cell)
    if any(m not in lr.multiples for m in lr.dense_multiples):
        _fail("eval.long_range.dense_multiples", list(lr.dense_multiples),
              f"each must be one of eval.long_range.multiples {list(lr.multiples)}")
    _positive("eval.long_range.n_needles", lr.n_needles)
    _positive("eval.long_range.workers", lr.workers)
    for key, allowed in (("tasks", LONG_TASKS), ("variants", LONG_RANGE_VARIANTS)):
        for v in getattr(lr, key):
            _choice(f"eval.long_range.{key}", v, allowed)
    if "random" in lr.variants and "focused" not in lr.variants:
        _fail("eval.long_range.variants", list(lr.variants), "'random' makes as many edits as 'focused' did: list both")
    _check_read_budget(cfg, "eval.long_range.budget", lr.budget)
    if lr.budget > cfg.model.max_seq_len:  # recency reads the last `budget` tokens in one window of the base
        _fail("eval.long_range.budget", lr.budget, f"recency reads that many raw tokens: must be <= model.max_seq_len "
              f"({cfg.model.max_seq_len})")
    _check_task_suite(cfg)
    return cfg


def _check_task_suite(cfg: RunConfig) -> None:
    ts = cfg.eval.tasks
    for key, allowed in (("tasks", TASK_SUITE_TASKS), ("variants", TASK_SUITE_VARIANTS)):
        for v in getattr(ts, key):
            _choice(f"eval.tasks.{key}", v, allowed)
    if not ts.variants:
        _fail("eval.tasks.variants", [], f"expected a non-empty list of {', '.join(TASK_SUITE_VARIANTS)}")
    if not ts.multiples or any(isinstance(m, bool) or not isinstance(m, int) or m < 2 for m in ts.multiples):
        _fail("eval.tasks.multiples", list(ts.multiples), "expected integers >= 2 (history lengths as multiples of "
              "the working-context budget mc.max_entries)")
    if not ts.depths or any(isinstance(d, bool) or not isinstance(d, (int, float)) or not 0.0 <= d <= 1.0 for d in ts.depths):
        _fail("eval.tasks.depths", list(ts.depths), "expected a non-empty list of fractions in [0, 1]")
    if isinstance(ts.depth_jitter, bool) or not isinstance(ts.depth_jitter, (int, float)) or not 0 <= ts.depth_jitter <= 0.5:
        _fail("eval.tasks.depth_jitter", ts.depth_jitter, "expected a number in [0, 0.5]")
    for k in ("n_per_cell", "n_keys", "hops"):
        _positive(f"eval.tasks.{k}", getattr(ts, k))
    if "random" in ts.variants and "focused" not in ts.variants:
        _fail("eval.tasks.variants", list(ts.variants), "'random' makes as many edits as 'focused' did: list both")
    _check_read_budget(cfg, "eval.tasks.budget", ts.budget)


def _check_read_budget(cfg: RunConfig, key: str, budget) -> None:
    """A sweep's read budget (eval.tasks.budget, eval.long_range.budget): 0, or more entries than the raw tail."""
    _positive(key, budget, 0, " (0 = read at mc.max_entries)")
    mc, window = cfg.mc, cfg.model.max_seq_len
    if budget and budget <= mc.recent_tokens:
        _fail(key, budget, f"must be larger than mc.recent_tokens ({mc.recent_tokens}), the raw tail "
              "every working context keeps, or 0 for mc.max_entries")
    if budget and mc.positions == "slots" and budget > window:
        _fail(key, budget, f"slots positions number the entries 0..budget-1: must be <= model.max_seq_len ({window})")
