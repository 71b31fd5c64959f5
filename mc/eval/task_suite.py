"""The task suite: passkey and RULER-style needles over real text, read seven ways at one entry budget.

Owns :func:`run_task_suite` (the ``tasks`` section of ``eval/eval.json``; ``scripts/mc_eval.py --tasks``)
and :func:`to_markdown` (its length x depth tables). For every task x history length (multiples of the
working-context budget ``W = mc.max_entries``) x depth bucket, ``eval.tasks.n_per_cell`` documents
(:mod:`mc.data.real_tasks`: held-out corpus text, needles, a question) are answered by greedy decoding and
scored with RULER's ``string_match_all``, under these variants:

* ``full``: the base over the whole history (only where it fits ``model.max_seq_len``, its window);
* ``recency``: the base over the last W tokens;
* ``compressed``: a session over the prompt (W entries of tokens and gists), no refocus;
* ``focused``: the same after one refocus with LensNet's scores (the run's refocus rules);
* ``random``: as many random-score edits as LensNet made on that document;
* ``salience``: the refocus search of ``focused`` with a non-learned locator instead of LensNet: each
  entry's lexical overlap with the question (the question's distinct tokens found in its span,
  weighted by their rarity across entries), the BM25-like workaround users reach for;
* ``oracle``: the best layout the budget allows around the needles that answer (the answer's tokens at LOD0
  first, then the rest of each needle, the question, then either the needles' neighbours or the newest history;
  :mod:`mc.eval.oracle_layout`), the better-read of the two plans kept per document: the layout a locator that
  knew the answer's place would choose.

Every number comes with its compression (history tokens / entries read) and a 95% interval over
documents (Wilson; for several references per document, over the references). The base
decodes with its KV cache in every variant (plain positions for ``full``/``recency``). Documents use
their own seed range, so no training document is a suite document.
"""
from __future__ import annotations

import time
import zlib

import torch
from torch import Tensor

from mc.config import TASK_SUITE_VARIANTS, RunConfig, to_dict
from mc.data.real_tasks import ANSWER_TOKENS, TaskDoc, filler_window, make_task_doc, string_match_all
from mc.eval.draws import draw_seed
from mc.eval.focus_policies import multi_span_oracle_refocus, random_refocus, salience_refocus
from mc.eval.long_range import needle_depth, needle_lod, run_long_range
from mc.eval.oracle_layout import ORACLE_RESTS
from mc.eval.read_budget import at_budget
from mc.eval.stats import proportion_ci
from mc.kv_cache import KVCache
from mc.nets.positional import rotary_cos_sin, rotary_full

SEED_OFFSET = 2_000_000  # suite documents never share a seed with training, the evaluation or the long-range sweep
SINGLE_ANSWER = ("passkey", "multikey")


@torch.no_grad()
def plain_greedy(base, ids: Tensor, n_new: int, *, eos_id: int | None = None) -> list[int]:
    """Greedy continuation of ``ids [L]`` by the base alone at plain positions 0..L-1, with a KV cache sized
    ``L + n_new`` (the prompt in one causal pass, then one entry per token); stops after ``eos_id``."""
    dev = next(base.parameters()).device
    n = int(ids.numel())
    cap = n + n_new
    cache = KVCache(base.cfg.n_layers, base.kv_heads, base.head_dim, cap, device=dev,
                    dtype=next(base.parameters()).dtype)
    cos, sin = rotary_full(*rotary_cos_sin(torch.arange(cap, device=dev), base.head_dim, base.cfg.rope_base))
    slots = torch.arange(cap, device=dev)
    logits = base.forward_cached(base.embed(ids.to(dev)[None]), cos[:n], sin[:n], cache.k, cache.v, slots[:n], n)[0]
    out: list[int] = []
    for i in range(n_new):
        tok = int(logits.argmax())
        out.append(tok)
        if tok == eos_id or i == n_new - 1:
            break
        p = n + i
        logits = base.forward_cached(base.embed(torch.tensor([[tok]], device=dev)), cos[p:p + 1], sin[p:p + 1],
                                     cache.k, cache.v, slots[p:p + 1], p + 1, masked=False)[0]
    return out


@torch.no_grad()
def session_greedy(ctrl, n_new: int, *, eos_id: int | None = None) -> list[int]:
    """Greedy continuation of the controller's session through its KV cache, with no refocus while answering
    (the layout chosen at the question stands); stops after ``eos_id``."""
    from mc.decode import decoder_for  # noqa: PLC0415 - the decoder needs the controller

    dec = decoder_for(ctrl)
    dec.reset()  # the session was restored to a snapshot: its tree slots may hold other tokens than the cache's
    out: list[int] = []
    for i in range(n_new):
        tok = int(dec.logits(ctrl.session).argmax())
        out.append(tok)
        if tok == eos_id or i == n_new - 1:
            break
        ctrl._extend(torch.tensor([tok], device=ctrl.device), refocus=False)
    return out


def run_sweeps(ctrl, cfg: RunConfig, *, progress: bool = False) -> dict:
    """The evaluation's optional sweeps: ``long_range`` (:mod:`mc.eval.long_range`) and ``tasks`` (this
    module), each only when configured (``eval.long_range.multiples``, ``eval.tasks.tasks``)."""
    out = {}
    if cfg.eval.long_range.multiples:
        out["long_range"] = run_long_range(ctrl, cfg, progress=progress)
    if cfg.eval.tasks.tasks:
        out["tasks"] = run_task_suite(ctrl, cfg, progress=progress)
    return out


def suite_doc(cfg: RunConfig, source, tok, task: str, length: int, depth: float, k: int) -> TaskDoc:
    """Document ``k`` of one cell (``task``, ``length`` tokens, depth bucket ``depth``) of the run's draw: the one
    the suite reads, so a probe that calls this reads the same documents."""
    ts = cfg.eval.tasks
    seed = SEED_OFFSET + draw_seed(cfg) * 10_000 + k
    cell_seed = zlib.crc32(repr((task, length, round(depth, 6), seed)).encode())
    return make_task_doc(task, length, needle_depth(depth, ts.depth_jitter, seed), seed, tok,
                         filler_window(source, length, cell_seed), n_keys=ts.n_keys, hops=ts.hops)


def run_task_suite(ctrl, cfg: RunConfig, *, progress: bool = False, source=None) -> dict:
    """The sweep (see the module docstring); ``{}`` when ``eval.tasks.tasks`` is empty. ``source``: the filler's
    corpus source (default: the held-out split of the run's corpus, tokenized by its tokenizer)."""
    from mc.data.hf_tokenizer import tokenizer_for  # noqa: PLC0415
    from mc.data.loader import make_source  # noqa: PLC0415
    if not cfg.eval.tasks.tasks:
        return {}
    ctrl, cfg = at_budget(ctrl, cfg, cfg.eval.tasks.budget)
    ts = cfg.eval.tasks
    tok = tokenizer_for(cfg.model)
    corpus = cfg.data if cfg.data.source != "recall" else type(cfg.data)(source="stdlib")
    source = source or make_source(corpus, "val", tokenizer=tok)
    budget, window = cfg.mc.max_entries, cfg.model.max_seq_len
    variants = [v for v in TASK_SUITE_VARIANTS if v in ts.variants]
    combos = [(t, m, d, k) for t in ts.tasks for m in ts.multiples for d in ts.depths for k in range(ts.n_per_cell)]
    from tqdm.auto import tqdm  # noqa: PLC0415

    bar = tqdm(total=len(combos), desc="tasks", disable=not progress, leave=False)
    t0, rows = time.time(), []
    for task, mult, depth, k in combos:
        doc = suite_doc(cfg, source, tok, task, mult * budget, depth, k)
        rows.append(_read_doc(ctrl, cfg, doc, mult, depth, k, variants, tok, window))
        bar.update(1)
    bar.close()
    # positions: the reader's numbering of the entries (mc.positions) decides how far it reads (obsidian Positions)
    return {"budget": budget, "base_window": window, "positions": cfg.mc.positions, "tasks": list(ts.tasks),
            "multiples": list(ts.multiples),
            "lengths": [m * budget for m in ts.multiples], "depths": list(ts.depths), "variants": variants,
            "depth_jitter": ts.depth_jitter, "n_per_cell": ts.n_per_cell, "seconds": round(time.time() - t0, 2),
            "draw_seed": draw_seed(cfg), "refocus": to_dict(cfg.allocator.inference),  # the search `focused` used
            "cells": _cells(rows, ts, variants, budget), "rows": rows}


def _read_doc(ctrl, cfg: RunConfig, doc: TaskDoc, mult: int, depth: float, k: int, variants: list[str], tok,
              window: int) -> dict:
    """One document through every variant: its row (score, answer text, entries read, edits, and the LOD of the
    needles that answer: the queried one for passkey and multikey, every one for multivalue and vartrack)."""
    n_new = ANSWER_TOKENS[doc.task]
    budget = cfg.mc.max_entries
    eos = getattr(tok, "eos_id", None)
    row = {"task": doc.task, "multiple": mult, "length": int(doc.ids.numel()), "depth": depth,
           "needle_depth": round(doc.depth, 6), "doc": k, "answers": list(doc.answers), "score": {}, "text": {},
           "entries": {}, "edits": {}, "needle_lod": {}, "answer_lod": {}}
    start, lens_edits = None, 0
    question = (doc.question_start, int(doc.ids.numel()))
    n_answering = 1 if doc.task in SINGLE_ANSWER else len(doc.needle_spans)  # multikey's others are distractors
    answering, cores = list(doc.needle_spans[:n_answering]), list(doc.answer_spans[:n_answering])
    for variant in variants:
        edits, lod, answer_lod = 0, None, None
        if variant in ("full", "recency"):
            ids = doc.ids if variant == "full" else doc.ids[-budget:]
            if variant == "full" and doc.ids.numel() + n_new > window:
                continue  # past the base's window: no full-context reference at this length
            out, entries = plain_greedy(ctrl.base, ids, n_new, eos_id=eos), int(ids.numel())
        else:
            if start is None:  # the prompt is gisted once per document; each variant starts from its snapshot
                start = ctrl.begin_session(doc.ids).snapshot()
            if variant == "oracle":  # reads each of its plans from the snapshot itself
                edits, (out, lod, answer_lod, entries) = _best_oracle(ctrl, doc, start, answering, cores, question,
                                                                      n_new, eos, tok, row)
            else:
                ctrl.session.restore(start)
                if variant == "focused":
                    edits = lens_edits = len(ctrl.refocus().edits)
                elif variant == "random":
                    edits = random_refocus(ctrl, lens_edits, torch.Generator().manual_seed(SEED_OFFSET + k))
                elif variant == "salience":
                    edits = salience_refocus(ctrl, question)
                out, lod, answer_lod, entries = _read_session(ctrl, answering, cores, n_new, eos)
        text = tok.decode(out)
        row["score"][variant] = string_match_all(text, doc.answers)
        row["text"][variant] = text[:200]
        row["entries"][variant], row["edits"][variant], row["needle_lod"][variant] = entries, edits, lod
        row["answer_lod"][variant] = answer_lod
    return row


def _read_session(ctrl, answering: list, cores: list, n_new: int, eos: int | None) -> tuple:
    """The session's layout as the answer begins, then its greedy answer: ``(out, needle lod, answer lod, entries)``
    (the LODs of the answering needles and of the answer's own tokens inside them)."""
    wc = ctrl.session.wc
    lod = max(needle_lod(wc, span) for span in answering)
    answer_lod = max(needle_lod(wc, span) for span in cores)
    return session_greedy(ctrl, n_new, eos_id=eos), lod, answer_lod, len(wc)


def _best_oracle(ctrl, doc: TaskDoc, start: tuple, answering: list, cores: list, question: tuple[int, int],
                 n_new: int, eos: int | None, tok, row: dict) -> tuple:
    """The oracle's read: each plan of :data:`ORACLE_RESTS` from the prompt's snapshot ``start``, decoded, and the
    one whose answer scores best kept (ties: the first). An upper bound knows the answer; which of the plans a
    reader reads best through differs by reader and length (obsidian Evaluation, "The oracle"), so the bound is
    the better of them. Sets ``row["oracle_plan"]`` and ``row["oracle_plans"]`` (each plan's own score: the bound takes
    the best of several reads of one document, so where the reader is near chance it gains on any single layout, a
    focus policy's included); returns ``(edits, (out, needle lod, answer lod, entries))``."""
    best, scores = None, {}
    for rest in ORACLE_RESTS:
        ctrl.session.restore(start)
        edits = multi_span_oracle_refocus(ctrl, answering, core=cores, question=question, rest=rest)
        read = _read_session(ctrl, answering, cores, n_new, eos)
        scores[rest] = score = string_match_all(tok.decode(read[0]), doc.answers)
        if best is None or score > best[0]:
            best = (score, rest, (edits, read))
    row["oracle_plan"], row["oracle_plans"] = best[1], scores
    return best[2]


def _score_ci(scores: list[float], n_refs: int, *, single: bool) -> dict:
    """95% interval of a cell's mean score: Wilson over documents for one-reference tasks; for several references
    per document, Wilson over all references (found k of n_docs x n_refs), which, unlike a normal interval over
    documents, does not claim certainty when every document scored 0 or 1 (references of one document are not
    independent, so it is somewhat narrow)."""
    if single:
        return proportion_ci(scores)
    found = [1.0] * round(sum(scores) * n_refs) + [0.0] * (len(scores) * n_refs - round(sum(scores) * n_refs))
    return proportion_ci(found)


def _cells(rows: list[dict], ts, variants: list[str], budget: int) -> list[dict]:
    cells = []
    for task in ts.tasks:
        for mult in ts.multiples:
            for depth in ts.depths:
                sel = [r for r in rows if (r["task"], r["multiple"], r["depth"]) == (task, mult, depth)]
                for variant in variants:
                    scores = [r["score"][variant] for r in sel if variant in r["score"]]
                    if not scores:
                        continue
                    ci = _score_ci(scores, len(sel[0]["answers"]), single=task in SINGLE_ANSWER)
                    read = [r["entries"][variant] for r in sel if variant in r["entries"]]
                    lods = [r["needle_lod"][variant] for r in sel if r["needle_lod"].get(variant) is not None]
                    alods = [r["answer_lod"][variant] for r in sel if r.get("answer_lod", {}).get(variant) is not None]
                    cells.append({"task": task, "multiple": mult, "length": mult * budget, "depth": depth,
                                  "variant": variant, "score": ci["mean"], "lo": ci["lo"], "hi": ci["hi"],
                                  "n": len(scores), "compression": round(mult * budget / (sum(read) / len(read)), 2),
                                  "needles_at_lod0": (sum(x == 0 for x in lods) / len(lods)) if lods else None,
                                  "answers_at_lod0": (sum(x == 0 for x in alods) / len(alods)) if alods else None,
                                  "edits": (sum(r["edits"][variant] for r in sel) / len(sel)) if sel else None})
    return cells


def _search_note(refocus: dict | None) -> str:
    """The refocus settings `focused` and `salience` searched with, as one sentence (older files have none)."""
    if not refocus:
        return ""
    return " Refocus search: " + ", ".join(f"{k} {v}" for k, v in refocus.items() if k != "refocus_interval") + "."


def to_markdown(res: dict) -> str:
    """One table per task: a row per variant, a column per (length, depth) cell: score [95% interval] and
    the compression (history / entries read)."""
    if not res:
        return ""
    lines = [f"Task suite: budget W = {res['budget']} entries, base window {res['base_window']} tokens"
             + (f", {res['positions']} positions" if res.get("positions") else "") + ", "  # older files: none
             f"{res['n_per_cell']} documents per cell (depth buckets +- {res['depth_jitter']}), greedy decoding "
             f"scored by string_match_all; {res['seconds']} s. Each cell: score [95% interval] (compression)."
             + (f" Documents seeded by draw {res['draw_seed']}." if res.get("draw_seed") is not None else "")
             + _search_note(res.get("refocus")), ""]
    by = {(c["task"], c["multiple"], c["depth"], c["variant"]): c for c in res["cells"]}
    cols = [(m, d) for m in res["multiples"] for d in res["depths"]]
    for task in res["tasks"]:
        lines += [f"**{task}**", "", "| variant | " + " | ".join(f"{m}x W, depth {d}" for m, d in cols) + " |",
                  "|---" * (1 + len(cols)) + "|"]
        for v in res["variants"]:
            cells = [by.get((task, m, d, v)) for m, d in cols]
            if not any(cells):
                continue
            lines.append(f"| {v} | " + " | ".join(
                "n/a" if c is None else f"{100 * c['score']:.0f}% [{100 * c['lo']:.0f}, {100 * c['hi']:.0f}] "
                                        f"({c['compression']:g}x)" for c in cells) + " |")
        lines += ["", *_detail_line(res, task), ""]
    return "\n".join(lines)


def _detail_line(res: dict, task: str) -> list[str]:
    """Per variant that read a session, in how many documents the answer's own tokens and the whole needles
    were at LOD0 when the answer began: a miss with the answer raw is the reader's, one without it the layout's."""
    parts = []
    for v in res["variants"]:
        rows = [r for r in res.get("rows", []) if r["task"] == task and r.get("answer_lod", {}).get(v) is not None]
        if rows:
            ans = sum(r["answer_lod"][v] == 0 for r in rows)
            whole = sum(r["needle_lod"][v] == 0 for r in rows)
            parts.append(f"{v} {ans}/{len(rows)} ({whole})")
    out = [f"At LOD0 when the answer began, answer tokens (whole needles): {'; '.join(parts)}."] if parts else []
    plans = [r["oracle_plan"] for r in res.get("rows", []) if r["task"] == task and "oracle_plan" in r]
    if plans:  # older files have none
        out.append("Oracle plan kept (the better-read, ties the first): "
                   + ", ".join(f"{p} {plans.count(p)}" for p in ORACLE_RESTS) + f" of {len(plans)}.")
    each = [r["oracle_plans"] for r in res.get("rows", []) if r["task"] == task and "oracle_plans" in r]
    if each:  # files before 2026-12-07 have none
        out.append("Each oracle plan alone, documents' scores summed: "
                   + ", ".join(f"{p} {sum(e[p] for e in each):g}" for p in ORACLE_RESTS) + f" of {len(each)}.")
    return out


def cell_ratio(res: dict, task: str, num: str, den: str) -> dict:
    """Per (multiple, depth) cell of ``task``: score(``num``) / score(``den``) (None where ``den`` scored 0)."""
    by = {(c["multiple"], c["depth"], c["variant"]): c["score"] for c in res.get("cells", []) if c["task"] == task}
    out = {}
    for (m, d, v), sc in by.items():
        if v == num and (m, d, den) in by:
            base = by[(m, d, den)]
            out[f"{m}x/{d}"] = None if not base else sc / base
    return out
