"""The run report's evaluation section (``eval/eval.json``): the variants, a table of every metric with its 95%
interval (edits per refocus beside the focused and random numbers), paired differences, recall examples, the
warnings a reader needs (focus did nothing, the base never learned the copy, ``full`` cut to the base's window),
then the long-range sweep, the task suite and the LOD maps.

Owns :func:`evaluation_section`, which :mod:`mc.app.report` calls with its report builder (``rep.add``,
``rep.plot``, ``rep.section_json``), and :func:`base_copy_warning`.
"""
from __future__ import annotations

import math

from mc.app.report_sweeps import long_range_section
from mc.eval.record_rank import record_rank_line
from mc.eval.stats import fmt_ci

VARIANT_ORDER = ("full", "recency", "compressed", "focused", "random")
NO_EDIT_WARN = 0.5  # warn when refocus chose no edit in more than this share of the documents
WEAK_COPY = 0.5  # full-context exact recall below this: the recall columns cannot show what focus adds
CHANCE_NLL = 0.9 * math.log(10)  # recall answer loss near ln 10 per digit: the base never learnt the copy
METRIC_COLUMNS = (("corpus_tail_loss", "corpus tail loss (nats/token)", False),
                  ("recall_tail_loss", "recall-doc tail loss", False),
                  ("corpus_stream_loss", "corpus tail, token by token", False),
                  ("recall_stream_loss", "recall-doc tail, token by token", False),
                  ("corpus_session_loss", "corpus, as a session reads it", False),
                  ("recall_session_loss", "recall doc, as a session reads it", False),
                  ("recall_answer_nll", "recall answer loss", False),
                  ("recall_accuracy", "exact recall", True))
STREAM_NOTE = ("The tail is read two ways. *Tail loss*: the tail appended in one chunk, every tail token scored under "
               "the layout after the last append (so it pays for collapses that later tail tokens force). *Token by "
               "token*: each tail token scored under what the budget holds right before it, as a decoding session "
               "reads it (recency: the last budget-many tokens before each token). Read the token-by-token columns "
               "for what a session gets.")


def session_note(settings: dict, per_doc: list[dict] = ()) -> str:
    """The line that says how the session columns were read (``eval.session_tail``), and with the refocus check
    (``allocator.inference.refocus_check``) how many of the focused session's refocuses it undid."""
    S, every = settings.get("session_tail"), settings.get("refocus_interval")
    line = (f"*As a session reads it*: each document's last {S} tokens token by token, `focused` refocused by "
            f"LensNet at their start and after every {every} tokens as `generate` does, `random` refocused at the "
            "same moments with as many edits from random scores, `compressed` never refocused; `recency` / `full` "
            "a sliding window.")
    k = ((settings.get("refocus") or {}).get("inference") or {}).get("refocus_check", 0)
    if k:
        checks = [d["session_checks"] for d in per_doc if d.get("session_checks")]
        line += (f" `focused` checked each refocus that made edits {k} tokens later and undid it where the layout "
                 f"without its edits fit those tokens better: {sum(c['undone'] for c in checks)} of "
                 f"{sum(c['checked'] for c in checks)} undone (`random`'s edits are not checked).")
    return line


def _edits_per_refocus(per_doc: list[dict]) -> dict[str, dict[str, float]]:
    """Mean edits per refocus ``{task: {"focused": x, "random": y}}`` from the per-document rows (``session``: over
    every refocus of the session reads)."""
    out: dict[str, dict[str, float]] = {}
    for task in ("tail", "recall", "session"):
        for v, key in (("focused", "edits"), ("random", "random_edits")):
            if task == "session":
                vals = [x for d in per_doc for x in (d.get("session_edits") or {}).get(v, [])]
            else:
                vals = [d[key][task] for d in per_doc if isinstance(d.get(key, {}).get(task), int)]
            if vals:
                out.setdefault(task, {})[v] = sum(vals) / len(vals)
        if task in out:
            out[task].setdefault("random", float("nan"))
            out[task].setdefault("focused", float("nan"))
    return out


def full_is_truncated(settings: dict) -> bool:
    """True when the evaluation's documents are longer than the base's window, so ``full`` read only their end."""
    n, window = settings.get("doc_tokens"), settings.get("max_seq_len")
    return bool(n and window and n > window)


def base_copy_warning(metrics: dict, settings: dict | None = None) -> str | None:
    """A line for the report when the base itself cannot answer the recall question with the whole document in
    view (then every variant's recall is ~0 because of the base, not of focus), else None. Documents longer than
    the base's window (``settings``' doc_tokens > max_seq_len) never had the whole document in ``full``'s view: a
    low ``full`` recall there says where the record was, not that the copy failed, and the line says so instead."""
    full = ((metrics.get("recall_accuracy") or {}).get("full") or {}).get("mean")
    if full is None or full >= WEAK_COPY:
        return None
    if full_is_truncated(settings or {}):
        return (f"**NOTE: `full` reads only the last {settings['max_seq_len']} of each document's "
                f"{settings['doc_tokens']} tokens** (the base's window), so its recall ({full:.0%}) is no measure of the "
                "base's own copy: these recall columns have no whole-document reference. An evaluation with "
                "eval.doc_tokens <= model.max_seq_len (the preset's own) has one.")
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


def evaluation_section(rep) -> None:
    """The evaluation: labels, the metrics table per variant, paired differences, edits, recall examples, record
    rank, the long-range sweep and task suite (their own sections), LOD maps."""
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
            task = ("recall" if c[0] in ("recall_answer_nll", "recall_accuracy") else
                    "session" if c[0].endswith("_session_loss") else "tail")
            if v in ("focused", "random") and task in per_task:  # the edit count beside every focused number
                cell += f" ({per_task[task][v]:.1f} edits/refocus)"
            cells.append(cell)
        rep.add(f"| {v} | " + " | ".join(cells) + " |")
    warning = base_copy_warning(metrics, s)
    if warning:
        rep.add("", warning)
    ci = ev.get("ci", {})
    rep.add("", f"Intervals: losses — {ci.get('losses', '?')}; accuracy — {ci.get('accuracy', '?')}. "
            "Lower loss is better, higher recall is better.", "")
    if "corpus_stream_loss" in metrics or "recall_stream_loss" in metrics:
        rep.add(STREAM_NOTE, "")
    if "corpus_session_loss" in metrics or "recall_session_loss" in metrics:
        rep.add(session_note(s, ev.get("per_doc", [])), "")
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
    long_range_section(rep, ev.get("long_range") or {}, None if full_is_truncated(s) else warning)
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
