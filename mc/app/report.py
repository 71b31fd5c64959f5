"""The run report: ``run_dir/report.md`` plus PNG plots under ``run_dir/plots/``.

``write_report(cfg, run_dir)`` gathers what the workflow left in the run folder and renders it:

1. training curves from ``stage1/metrics.jsonl`` and ``stage2/metrics.jsonl`` (every numeric key
   is read defensively; loss-like keys are plotted);
2. the evaluation table from ``eval/eval.json`` (means with 95% intervals, paired differences; the
   long-range sweep and the task suite when they ran);
3. LOD maps of working contexts before and after refocus (the entries were saved by the evaluation);
4. the compile summary (``harness/verdict.json``, ``telemetry.jsonl``); 5. the benchmark table (``bench/bench.json``).

Every part is optional: a missing or unreadable file becomes a line saying what is missing and which
stage produces it, never an exception. Plots need matplotlib; without it the report says so."""
from __future__ import annotations

import json
import math
import time
from collections import Counter
from pathlib import Path

from mc.app.report_sweeps import long_range_section
from mc.config import RunConfig
from mc.eval.record_rank import record_rank_line
from mc.eval.stats import fmt_ci
from mc.io import write_text

VARIANT_ORDER = ("full", "recency", "compressed", "focused", "random")
NO_EDIT_WARN = 0.5  # warn when refocus chose no edit in more than this share of the documents
WEAK_COPY = 0.5  # full-context exact recall below this: the recall columns cannot show what focus adds
CHANCE_NLL = 0.9 * math.log(10)  # recall answer loss near ln 10 per digit: the base never learnt the copy
METRIC_COLUMNS = (("corpus_tail_loss", "corpus tail loss (nats/token)", False),
                  ("recall_tail_loss", "recall-doc tail loss", False),
                  ("corpus_stream_loss", "corpus tail, token by token", False),
                  ("recall_stream_loss", "recall-doc tail, token by token", False),
                  ("recall_answer_nll", "recall answer loss", False),
                  ("recall_accuracy", "exact recall", True))


# ----------------------------------------------------------------------------- reading
def read_jsonl(path: Path) -> tuple[list[dict], str | None]:
    """Records of a JSONL file; unreadable lines are skipped and counted in the note."""
    if not path.is_file():
        return [], None
    rows, bad = [], 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            bad += 1
            continue
        if isinstance(rec, dict):
            rows.append(rec)
    return rows, (f"{bad} unreadable line(s) skipped" if bad else None)


def read_json(path: Path) -> tuple[dict | None, str | None]:
    if not path.is_file():
        return None, None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, OSError) as exc:
        return None, f"`{path.name}` is unreadable ({type(exc).__name__}: {exc})"
    return (data, None) if isinstance(data, dict) else (None, f"`{path.name}` does not hold a JSON object")


def _num(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def metric_series(rows: list[dict]) -> dict[str, tuple[list[float], list[float]]]:
    """``{key: (steps, values)}`` for every numeric key (x = ``step`` when present, else the row index)."""
    out: dict[str, tuple[list[float], list[float]]] = {}
    for i, r in enumerate(rows):
        x = _num(r.get("step"))
        x = float(i) if x is None else x
        for k, v in r.items():
            y = _num(v)
            if k == "step" or y is None:
                continue
            xs, ys = out.setdefault(k, ([], []))
            xs.append(x)
            ys.append(y)
    return out


# ----------------------------------------------------------------------------- sections


class _Report:
    def __init__(self, run_dir: Path, plots: bool, why_no_plots: str | None):
        self.run_dir = run_dir
        self.plot_dir = run_dir / "plots"
        self.plots = plots
        self.why_no_plots = why_no_plots
        self.lines: list[str] = []
        self.missing: list[str] = []

    def add(self, *lines: str) -> None:
        self.lines.extend(lines)

    def image(self, path: Path, alt: str) -> None:
        self.add(f"![{alt}]({path.relative_to(self.run_dir).as_posix()})", "")

    def plot(self, fn, *args, alt: str, **kw) -> None:
        """Draw a plot; a failure is reported in the text instead of aborting the report."""
        if not self.plots:
            return
        try:
            self.image(fn(*args, **kw), alt)
        except Exception as exc:  # a plot must never cost the whole report
            self.add(f"_(plot `{alt}` failed: {type(exc).__name__}: {exc})_", "")

    def note_missing(self, what: str, how: str) -> None:
        self.missing.append(what)
        self.add(f"_Not available: {what} — {how}._", "")

    def section_json(self, title: str, rel: str, what: str, how: str) -> dict | None:
        """Start section ``title`` and read ``run_dir/rel``; when it is missing or unreadable, say
        so (the read error, else ``how`` to produce it) and return None."""
        self.add(f"## {title}", "")
        data, err = read_json(self.run_dir / rel)
        if data is None:
            self.note_missing(f"{what} (`{rel}`)", err or how)
        return data


def _training(rep: _Report) -> None:
    rep.add("## Training curves", "")
    for stage, produced in (("stage1", "stage 1 (base pretraining)"), ("stage2", "stage 2 (GistNet + LensNet)")):
        path = rep.run_dir / stage / "metrics.jsonl"
        rows, note = read_jsonl(path)
        if not rows:
            rep.note_missing(f"{stage} metrics (`{stage}/metrics.jsonl`)", f"run {produced} to produce it")
            continue
        series = metric_series(rows)
        last = rows[-1]
        rep.add(f"### {stage}: {len(rows)} logged steps (last step {last.get('step', '?')})", "")
        if note:
            rep.add(f"_{note}_", "")
        if stage == "stage1":
            _copy_gate_line(rep)
        keys = [k for k in series if k not in ("lr",)]
        rep.add("| metric | first | last | min |", "|---|---|---|---|")
        for k in keys:
            ys = series[k][1]
            rep.add(f"| {k} | {ys[0]:.4g} | {ys[-1]:.4g} | {min(ys):.4g} |")
        rep.add("")
        _training_plots(rep, stage, series)


def _copy_gate_line(rep: _Report) -> None:
    """Stage 1's copy gate, when it was on: where it stopped and whether the base met the query-loss target."""
    if not (gate := (read_json(rep.run_dir / "stage1" / "summary.json")[0] or {}).get("copy_gate")):
        return
    why = (f"training on stopped at step {gate['stopped_at']}, no better: the base kept is step {gate['step']}'s and"
           if "stopped_at" in gate else "at its cap, train.stage1.max_steps_factor: the base")  # best weights kept
    how = "met" if gate["met"] else f"**NOT met** ({why} may not copy)"
    rep.add(f"Copy gate {how} at step {gate['step']}: validation query loss {gate['val_query_loss']:.4f}, "
            f"target {gate['target']} (obsidian Training, \"Stage-1 copy gate\").", "")


_CE = "cross-entropy (nats/token)"


def _training_plots(rep: _Report, stage: str, series: dict) -> None:
    """LM losses on their own axis; stage 2's preference loss and gap (other scales) in a second
    figure with one panel each; accuracy in a third. Every axis labelled (obsidian Training)."""
    from mc.app.plots import plot_curves, plot_panels  # noqa: PLC0415

    def pick(*names: str) -> dict:  # a metric and its val_ twin
        return {k: series[k] for k in series if k.removeprefix("val_") in names}

    lm = pick("train_loss", "val_loss", "lm_loss", "baseline_loss", "best_loss")
    if lm:
        rep.plot(plot_curves, lm, rep.plot_dir / f"{stage}_losses.png", title=f"{stage} language-model losses",
                 ylabel=_CE, alt=f"{stage} losses")
    aux = [(title, ylabel, sub) for title, ylabel, sub in (
        ("LensNet preference loss", "preference loss", pick("pref_loss")),
        ("gap = recency-baseline loss - best variant loss", "loss difference (nats/token)", pick("gap"))) if sub]
    if aux:
        rep.plot(plot_panels, aux, rep.plot_dir / f"{stage}_aux.png", alt=f"{stage} auxiliary losses")
    acc = {k: v for k, v in series.items() if "acc" in k}
    if acc:
        rep.plot(plot_curves, acc, rep.plot_dir / f"{stage}_accuracy.png", title=f"{stage} preference accuracy",
                 ylabel="share of entries with the right score sign", alt=f"{stage} accuracy")


def _edits_per_refocus(per_doc: list[dict]) -> dict[str, dict[str, float]]:
    """Mean edits per refocus ``{task: {"focused": x, "random": y}}`` from the per-document rows."""
    out: dict[str, dict[str, float]] = {}
    for task in ("tail", "recall"):
        for v, key in (("focused", "edits"), ("random", "random_edits")):
            vals = [d[key][task] for d in per_doc if isinstance(d.get(key, {}).get(task), int)]
            if vals:
                out.setdefault(task, {})[v] = sum(vals) / len(vals)
        if task in out:
            out[task].setdefault("random", float("nan"))
            out[task].setdefault("focused", float("nan"))
    return out


def base_copy_warning(metrics: dict) -> str | None:
    """A line for the report when the base itself cannot answer the recall question with the whole document in
    view (then every variant's recall is ~0 because of the base, not of focus), else None."""
    full = ((metrics.get("recall_accuracy") or {}).get("full") or {}).get("mean")
    if full is None or full >= WEAK_COPY:
        return None
    nll = ((metrics.get("recall_answer_nll") or {}).get("full") or {}).get("mean")
    if nll is not None and nll >= CHANCE_NLL:
        return (f"**WARNING: the base did not learn the recall copy**: with the whole document in view it recalls "
                f"{full:.0%} (answer loss {nll:.2f} nats/token, chance over ten digits is {math.log(10):.2f}). Every "
                "variant's recall, here and in the long-range sweep, is ~0 for that reason, not because of focus: "
                "train stage 1 longer, or gate it on the copy (train.stage1.query_loss_target; obsidian Training, "
                "\"Stage-1 copy gate\").")
    return (f"**NOTE: the base recalls only {full:.0%} with the whole document in view**"
            + (f" (answer loss {nll:.2f} nats/token)" if nll is not None else "")
            + ": the recall columns are bounded by the base's own copy and show little of what focus adds.")


def _evaluation(rep: _Report) -> None:
    from mc.app.plots import plot_eval_bars, plot_lod_map  # noqa: PLC0415

    ev = rep.section_json("Evaluation: same budget, four ways to read a long document", "eval/eval.json", "evaluation",
                          "run the evaluation stage (mc.eval.run_evaluation / scripts/mc_eval.py) to produce it")
    if ev is None:
        return
    s = ev.get("settings", {})
    docs = ev.get("documents", {})
    rep.add(f"Budget **{ev.get('budget')} entries**; {docs.get('n_corpus', '?')} corpus + {docs.get('n_recall', '?')} "
            f"recall documents of {s.get('doc_tokens')} tokens; tail loss over the last {s.get('tail_tokens')} tokens; "
            f"recall answers of {s.get('value_len')} tokens. Preset `{ev.get('preset')}`, device `{ev.get('device')}`, "
            f"torch {ev.get('torch')}, {ev.get('created')} ({ev.get('seconds')} s)."
            + (f" Documents of draw {s['draw_seed']} (`eval.draw_seed={s['draw_seed']}` reads them again)."
               if s.get("draw_seed_set") else " Documents of the default draw (eval.draw_seed unset: seeded by "
               "train.seed)." if "draw_seed" in s else ""), "")
    if docs.get("corpus"):
        rep.add(f"Corpus documents: {docs['corpus']}.", "")
    labels = ev.get("variants", {})
    for v in VARIANT_ORDER:
        if v in labels:
            rep.add(f"- **{v}**: {labels[v]}")
    rep.add("")
    metrics = ev.get("metrics", {})
    cols = [c for c in METRIC_COLUMNS if c[0] in metrics]
    per_task = _edits_per_refocus(ev.get("per_doc", []))
    rep.add("| variant | " + " | ".join(c[1] for c in cols) + " |", "|---" * (len(cols) + 1) + "|")
    for v in VARIANT_ORDER:
        if not any(v in (metrics.get(c[0]) or {}) for c in cols):
            continue  # an older eval.json without this variant
        cells = []
        for c in cols:
            cell = fmt_ci((metrics.get(c[0]) or {}).get(v), percent=c[2])
            # the tail losses of recall documents come from the tail's refocus, the answers from the query's
            task = "recall" if c[0] in ("recall_answer_nll", "recall_accuracy") else "tail"
            if v in ("focused", "random") and task in per_task:  # the edit count beside every focused number
                cell += f" ({per_task[task][v]:.1f} edits/refocus)"
            cells.append(cell)
        rep.add(f"| {v} | " + " | ".join(cells) + " |")
    warning = base_copy_warning(metrics)
    if warning:
        rep.add("", warning)
    ci = ev.get("ci", {})
    rep.add("", f"Intervals: losses — {ci.get('losses', '?')}; accuracy — {ci.get('accuracy', '?')}. "
            "Lower loss is better, higher recall is better.", "")
    paired = ev.get("paired", {})
    if paired:
        rep.add("Paired differences over the same documents (a − b, 95% interval; an interval that excludes 0 is a "
                "clear difference):", "")
        pairs = sorted({p for per in paired.values() for p in per})
        pcols = [c for c in cols if c[0] in paired]
        rep.add("| a − b | " + " | ".join(c[1] for c in pcols) + " |", "|---" * (len(pcols) + 1) + "|")
        for p in pairs:
            rep.add(f"| {p.replace('-', ' − ')} | " + " | ".join(
                fmt_ci((paired.get(c[0]) or {}).get(p), percent=c[2]) for c in pcols) + " |")
        rep.add("")
    rep.plot(plot_eval_bars, metrics, VARIANT_ORDER, rep.plot_dir / "eval_bars.png", alt="evaluation means with 95% CI")
    edits = [d.get("edits", {}) for d in ev.get("per_doc", [])]
    n_ed = [e.get(k) for e in edits for k in e if isinstance(e.get(k), int)]
    if n_ed:
        idle = sum(1 for x in n_ed if x == 0)
        rep.add(f"Refocus edits per document (focused variant): mean {sum(n_ed) / len(n_ed):.2f}, "
                f"{idle} of {len(n_ed)} refocuses chose no edit.", "")
        if idle > NO_EDIT_WARN * len(n_ed):
            rep.add(f"**WARNING: focus did nothing** in {idle} of {len(n_ed)} refocuses (more than "
                    f"{NO_EDIT_WARN:.0%}): the focused numbers above are mostly the compressed layout's.", "")
    examples = [d for d in ev.get("per_doc", []) if d.get("predicted")][:4]
    if examples:
        rep.add("Recall examples (answer → greedy decode per variant):", "")
        rep.add("| document | answer | " + " | ".join(VARIANT_ORDER) + " |", "|---" * (len(VARIANT_ORDER) + 2) + "|")
        for d in examples:
            p = d["predicted"]
            rep.add(f"| {d.get('doc')} | `{p.get('answer')}` | " + " | ".join(f"`{p.get(v, '')}`" for v in VARIANT_ORDER) + " |")
        rep.add("")
    rep.add(*([record_rank_line(ev["record_rank"]), ""] if ev.get("record_rank") else []))
    long_range_section(rep, ev.get("long_range") or {}, warning)
    from mc.eval.task_suite import to_markdown  # noqa: PLC0415 - the suite renders its own tables
    rep.add(*(["### Task suite", "", to_markdown(ev["tasks"])] if ev.get("tasks") else []))
    maps = ev.get("lod_maps", [])
    rep.add("### LOD maps before and after refocus", "")
    if not maps:
        rep.add("_No LOD maps were saved by the evaluation._", "")
    else:
        rep.add("x = token position, colour = level of detail of the entry covering the token (LOD0 = raw tokens); "
                "upper band before the refocus, lower band after it. Red boxes: the queried record and the query.", "")
    for i, rec in enumerate(maps):
        before, after = rec.get("before", []), rec.get("after", [])
        changed = sum(1 for e in after if e not in before)
        rep.add(f"- `{rec.get('doc')}` ({rec.get('what')}): {len(before)} → {len(after)} entries, "
                f"{changed} entries new after refocus")
        rep.plot(plot_lod_map, rec, rep.plot_dir / f"lod_map_{i}.png", alt=f"LOD map {rec.get('doc')}")
    rep.add("")


def _compile(rep: _Report) -> None:
    verdict = rep.section_json("Compile summary", "harness/verdict.json", "harness verdict", "written when a compile "
                               "flag is on and scripts/mc_compile_harness.py runs; an eager run has none")
    if verdict is not None:
        info = verdict.get("info", {}) if isinstance(verdict.get("info"), dict) else {}
        cg = verdict.get("cudagraph")
        cg_status = cg.get("status") if isinstance(cg, dict) else cg
        rep.add(f"Harness: **{'PASSED' if verdict.get('passed') else 'FAILED'}** on {verdict.get('device', '?')}, "
                f"torch {verdict.get('torch_version', '?')}; modes {info.get('compile_modes', '?')}; "
                f"recompiles after warm-up {verdict.get('recompiles_after_warmup')}, graph breaks "
                f"{verdict.get('graph_breaks')}, CUDA graphs {cg_status}.", "")
        checks = verdict.get("checks", {})
        if isinstance(checks, dict) and checks:
            rep.add("| check | passed | value | detail |", "|---|---|---|---|")
            for name, c in checks.items():
                if isinstance(c, dict):
                    detail = " ".join(str(c.get("detail", "")).split())[:200].replace("|", "/")
                    rep.add(f"| {name} | {'yes' if c.get('passed') else 'NO'} | {c.get('value')} | {detail} |")
            rep.add("")
    rows, note = read_jsonl(rep.run_dir / "telemetry.jsonl")
    if not rows:
        rep.note_missing("run telemetry (`telemetry.jsonl`)", "written by training/evaluation when telemetry.jsonl "
                         "is on")
        return
    kinds = Counter(str(r.get("kind")) for r in rows)
    compiles = [r for r in rows if r.get("kind") == "compile"]
    by_trigger = Counter(str(r.get("trigger")) for r in compiles)
    ctime = sum(_num(r.get("duration_s")) or 0.0 for r in compiles if r.get("trigger") in ("DYNAMO", "LAZY_BACKWARD"))
    steady = [r for r in compiles if r.get("phase") == "steady"]
    recompiles = [r for r in rows if r.get("kind") in ("recompile", "recompile_refused")]
    reentr = [r for r in rows if r.get("kind") == "reentrance"]
    rep.add(f"Telemetry: {len(rows)} events ({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))})"
            + (f"; {note}" if note else "") + ".", "")
    rep.add("| quantity | value |", "|---|---|",
            f"| compile events (by trigger) | {dict(by_trigger) or 0} |",
            f"| compile time (Dynamo + lazy backward) | {ctime:.2f} s |",
            f"| compiles after warm-up (steady phase) | {len(steady)} |",
            f"| recompiles (with guard text; refused by freeze=fail included) | {len(recompiles)} |",
            f"| CUDA-graph recordings | {by_trigger.get('CUDAGRAPH_RECORDING', 0)} |",
            f"| re-entrance events | {len(reentr)} |", "")
    if recompiles:
        from mc.compile.guards import describe  # noqa: PLC0415 - only a run with recompiles needs it
    for r in recompiles[:5]:  # every failed guard with its source line where the event has them
        text = describe({**r, "refused": r["kind"] == "recompile_refused"}, 300) if r.get("guards") else \
            f"recompile `{r.get('co_name')}`: {' '.join(str(r.get('reason', '')).split())[:300]}"
        rep.add(f"- ({r.get('phase')}) {text}")
    if recompiles:
        rep.add("")
    if not compiles:
        rep.add("No compile events: every net ran eagerly in this run (compile flags off), so graph breaks, "
                "recompiles and CUDA graphs do not apply.", "")


def _bench(rep: _Report) -> None:
    from mc.app.bench import to_markdown  # noqa: PLC0415

    res = rep.section_json("Benchmarks", "bench/bench.json", "benchmark", "run `python scripts/mc_bench.py --json "
                           f"{(rep.run_dir / 'bench' / 'bench.json').as_posix()}` to produce it")
    if res is None:
        return
    try:
        rep.add(to_markdown(res).replace("### ", "", 1), "")
    except (KeyError, TypeError) as exc:
        rep.note_missing("a readable benchmark table", f"bench.json lacks an expected field ({exc}); re-run the benchmark")


def write_report(cfg: RunConfig, run_dir: str | Path) -> Path:
    """Render ``run_dir/report.md`` (and ``run_dir/plots/*.png``); returns the report's path."""
    from mc.app.plots import matplotlib_missing  # noqa: PLC0415

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run folder {run_dir} does not exist; run the workflow first (bash run10.sh)")
    why = matplotlib_missing()
    rep = _Report(run_dir, plots=why is None, why_no_plots=why)
    rep.add(f"# MegaContext run report: `{cfg.name}`", "",
            f"Preset `{cfg.preset}`; model d={cfg.model.d_model} x {cfg.model.n_layers} layers "
            f"(max_seq_len {cfg.model.max_seq_len}); K={cfg.mc.block_size}, max_lod={cfg.mc.max_lod}, working-context "
            f"budget {cfg.mc.max_entries} entries, recent tail {cfg.mc.recent_tokens}; written "
            f"{time.strftime('%Y-%m-%d %H:%M:%S')}.", "")
    if why:
        rep.add(f"_Plots skipped: {why}._", "")
    for section in (_evaluation, _training, _compile, _bench):
        section(rep)
    if rep.missing:
        rep.add("## Missing parts", "", *[f"- {m}" for m in rep.missing], "")
    return write_text(run_dir / "report.md", "\n".join(rep.lines) + "\n")
