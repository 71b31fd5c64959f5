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

from mc.app.report_eval import evaluation_section
from mc.config import RunConfig
from mc.io import write_text


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
    for section in (evaluation_section, _training, _compile, _bench):
        section(rep)
    if rep.missing:
        rep.add("## Missing parts", "", *[f"- {m}" for m in rep.missing], "")
    return write_text(run_dir / "report.md", "\n".join(rep.lines) + "\n")
