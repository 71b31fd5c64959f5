"""The long-range sweep: passkey and multi-needle recall far past the base model's trained window.

Owns ``run_long_range(ctrl, cfg)``, the ``long_range`` section of ``eval/eval.json``
(obsidian Evaluation, "Long-range sweep"). For every task x history length (multiples of
``model.max_seq_len``, the base's trained window) x needle depth, ``eval.long_range.n_per_cell``
generated documents (``dense_n_per_cell`` at the ``dense_multiples``; :mod:`mc.data.long_tasks`) are read
several ways at the same entry budget ``B`` (``eval.long_range.budget``, else ``mc.max_entries``:
:func:`mc.eval.read_budget.at_budget`), and the queried value is greedy-decoded after the query:

* ``recency``: the base model over the last B tokens at LOD0;
* ``compressed``: a controller session over the prompt, no refocus;
* ``focused``: the same session after one LensNet refocus (``MCController.refocus``; with
  ``allocator.inference.branches > 1`` the row's ``branch`` says which path it kept);
* ``random``: the same session after as many random-score edits as LensNet made on that document;
* ``salience``: the same session after the refocus search of ``focused`` with a non-learned locator in place of
  LensNet (:func:`mc.eval.focus_policies.salience_scores`: each entry's lexical overlap with the query), the
  baseline LensNet must beat;
* ``oracle``: the session's layout replaced by the best one the budget allows around the needle record
  (the record at LOD0, then its neighbours; :mod:`mc.eval.oracle_layout`): the upper bound of any focus
  policy at this budget.

A depth is a bucket, not one token position: each document's needle starts at a depth drawn
uniformly from ``depth +- eval.long_range.depth_jitter`` (clipped to [0, 1]; the row keeps it as
``needle_depth``). Why: with one exact position per cell, every document of the cell shares the
needle's alignment with the gist grid, so one unlucky offset decides the whole cell (at 32x, depth
0.25 puts every record across the boundary of two 512-token gists, where even the oracle scored
0/24; obsidian Evaluation). ``depth_jitter: 0`` gives the exact depth (the first sweeps).
Documents use evaluation seeds (offset from training's) so no sweep document was trained on. Their filler,
record templates and decoys follow ``data.recall`` (:mod:`mc.data.haystack`: a corpus haystack reads the
validation split), and with ``data.recall.eval_template`` set each task is also swept as ``<task>@held_out``
with that never-trained template.
Accuracy per cell comes with a Wilson 95% interval, and ``needle_at_lod0`` says in how many documents
the layout held the needle at full detail when the answer began (so a miss splits into "focus did not
get there" and "the base did not copy it"); the per-document rows are kept, with ``needle_lod``, each variant's
answer (``said``) and whether it was another record's value (``copied_decoy``, also a share per cell).
"""
from __future__ import annotations

import random
import time
import zlib

import torch
from torch import Tensor

from mc.config import LONG_RANGE_VARIANTS, RunConfig
from mc.controller import MCController
from mc.data.hf_tokenizer import tokenizer_for
from mc.data.loader import corpus_haystack
from mc.data.long_tasks import make_long_doc
from mc.eval.baselines import lod0_answer
from mc.eval.draws import draw_seed
from mc.eval.focus_policies import oracle_refocus, random_refocus, salience_refocus, span_scores
from mc.eval.read_budget import at_budget
from mc.eval.stats import proportion_ci
from mc.eval.sweep_workers import read_in_workers

SEED_OFFSET = 1_000_000  # sweep documents never share a seed with training or the main evaluation


def needle_lod(wc, span: tuple[int, int]) -> int:
    """The coarsest LOD among the working-context entries covering tokens ``span`` (0: all at full detail)."""
    return max(wc[int(i)][0] for i in span_scores(wc, *span).nonzero().flatten())


@torch.no_grad()
def _answer(ctrl: MCController, start: tuple, answer: Tensor, variant: str, n_edits: int,
            span: tuple[int, int], generator: torch.Generator, query: tuple[int, int]
            ) -> tuple[list[int], int, int]:
    """Greedy answer of one session variant: ``(answer ids, edits, needle LOD after the refocus)``, from the
    controller's session over the prompt restored to ``start`` (its snapshot). ``n_edits`` is LensNet's
    count (random); ``query`` the prompt's query tokens (salience)."""
    s = ctrl.session
    s.restore(start)
    if variant == "focused":
        edits = len(ctrl.refocus().edits)
    elif variant == "random":
        edits = random_refocus(ctrl, n_edits, generator)
    elif variant == "salience":
        edits = salience_refocus(ctrl, query)
    elif variant == "oracle":
        edits = oracle_refocus(ctrl, span)
    else:
        edits = 0
    lod = needle_lod(s.wc, span)  # a failure with the needle at LOD0 is the base's copy; above it, the focus's
    out = []
    for _ in range(answer.numel()):  # no refocus while answering: the layout chosen at the query stands
        tok = int(ctrl.next_token_logits().argmax())
        out.append(tok)
        ctrl.append(torch.tensor([tok]), refocus=False)
    return out, edits, lod


def needle_depth(depth: float, jitter: float, seed: int) -> float:
    """The needle depth of one document of the bucket ``depth``: uniform in ``depth +- jitter``, clipped to
    [0, 1]; ``depth`` itself when ``jitter`` is 0. Same arguments -> same depth, in every process."""
    if jitter == 0:
        return depth
    rng = random.Random(zlib.crc32(repr(("needle_depth", round(depth, 6), round(jitter, 6), int(seed))).encode()))
    return min(1.0, max(0.0, depth + rng.uniform(-jitter, jitter)))


def long_range_lengths(cfg: RunConfig) -> list[int]:
    """History lengths of the sweep: ``multiples x model.max_seq_len`` tokens."""
    return [m * cfg.model.max_seq_len for m in cfg.eval.long_range.multiples]


def sweep_tasks(cfg: RunConfig) -> dict[str, tuple[str, str | None]]:
    """Sweep task name -> (long-range task, record template or None = the training templates in turn). With
    ``data.recall.eval_template`` set, every task runs again as ``<task>@held_out`` with that template only."""
    out: dict[str, tuple[str, str | None]] = {t: (t, None) for t in cfg.eval.long_range.tasks}
    if cfg.data.recall.eval_template:
        out.update({f"{t}@held_out": (t, cfg.data.recall.eval_template) for t in cfg.eval.long_range.tasks})
    return out


def docs_per_cell(cfg: RunConfig, length: int) -> int:
    """Documents per (task, depth) cell at history ``length``: ``dense_n_per_cell`` at a multiple listed in
    ``dense_multiples``, else ``n_per_cell``. Document k has the same seed whatever the count, so a larger count
    adds documents to a cell and keeps the first ones."""
    lr = cfg.eval.long_range
    return lr.dense_n_per_cell if length // cfg.model.max_seq_len in lr.dense_multiples else lr.n_per_cell


class _DocReader:
    """Reads one sweep document every way (``self(combo) -> row``); what :func:`read_in_workers` calls, in this
    process or in a forked worker."""

    def __init__(self, ctrl: MCController, cfg: RunConfig, tasks: dict, variants: list[str], tok, haystack) -> None:
        self.ctrl, self.cfg, self.tasks, self.variants, self.tok, self.haystack = ctrl, cfg, tasks, variants, tok, haystack

    def __call__(self, combo: tuple[str, int, float, int]) -> dict:
        ctrl, cfg, tok = self.ctrl, self.cfg, self.tok
        lr, rc, budget = cfg.eval.long_range, cfg.data.recall, cfg.mc.max_entries
        name, length, depth, k = combo
        task, template = self.tasks[name]
        seed = SEED_OFFSET + draw_seed(cfg) * 10_000 + k
        doc_depth = needle_depth(depth, lr.depth_jitter, seed)
        doc = make_long_doc(task, length, doc_depth, seed, key_len=rc.key_len, value_len=rc.value_len,
                            n_needles=lr.n_needles, tokenizer=tok, template=template or rc.templates[k % len(rc.templates)],
                            haystack=self.haystack, near_decoys=rc.near_decoys,
                            exclude=[rc.eval_template] if rc.eval_template else ())
        row = {"task": name, "template": doc.template, "length": length, "depth": depth, "needle_depth": round(doc_depth, 6),
               "needle_start": doc.queried_span[0], "doc": k, "answer": doc.answer,
               "exact": {}, "said": {}, "edits": {}, "needle_lod": {}}
        # a wrong answer that is another record's value: the base copied a decoy (multi-needle), not noise
        decoys = {v for i, v in enumerate(doc.values) if i != doc.answer_record and v != doc.answer}
        truth = doc.ids[-rc.value_len:]
        lensnet_edits, start = 0, None
        for variant in self.variants:
            if variant == "recency":
                read = lod0_answer(ctrl.base, doc.ids, window=budget, value_len=rc.value_len)
                row["said"][variant], row["exact"][variant] = tok.decode(read["predicted"]), read["exact"]
                continue
            if start is None:  # the prompt is gisted once per document; each variant starts from a copy
                start = ctrl.begin_session(doc.ids[:-rc.value_len]).snapshot()
            gen = torch.Generator().manual_seed(SEED_OFFSET + k)
            said, edits, lod = _answer(ctrl, start, truth, variant, lensnet_edits,
                                       doc.queried_span, gen, (doc.query_start, doc.ids.numel() - rc.value_len))
            exact = said == truth.tolist()
            row["said"][variant] = tok.decode(said)
            if variant == "focused":
                lensnet_edits = edits
                row["branch"] = ctrl.session.refocus_log[-1].branch  # 0: LensNet's own path (allocator.inference.branches)
            row["exact"][variant], row["edits"][variant], row["needle_lod"][variant] = exact, edits, lod
        row["copied_decoy"] = {v: row["said"][v].strip() in decoys for v in row["said"]}
        return row


def run_long_range(ctrl: MCController, cfg: RunConfig, *, progress: bool = False) -> dict:
    """The sweep (see the module docstring); ``{}`` when ``eval.long_range.multiples`` is empty."""
    lr = cfg.eval.long_range
    if not lr.multiples:
        return {}
    ctrl, cfg = at_budget(ctrl, cfg, lr.budget)
    rc = cfg.data.recall
    budget = cfg.mc.max_entries
    shortest = min(long_range_lengths(cfg))
    if shortest <= budget:
        raise ValueError(f"long-range length {shortest} is not longer than the read budget {budget}; "
                         "raise eval.long_range.multiples")
    variants = [v for v in LONG_RANGE_VARIANTS if v in lr.variants]  # "focused" before "random": it sets the count
    tasks = sweep_tasks(cfg)
    combos = [(t, n, d, k) for t in tasks for n in long_range_lengths(cfg) for d in lr.depths
              for k in range(docs_per_cell(cfg, n))]
    try:
        from tqdm import tqdm  # noqa: PLC0415
        bar = tqdm(total=len(combos), desc="long-range", disable=not progress, leave=False)
    except ImportError:  # pragma: no cover - tqdm is a dependency
        bar = None
    t0 = time.time()
    tok = tokenizer_for(cfg.model)  # bytes, or the model=hf base's own tokenizer
    reader = _DocReader(ctrl, cfg, tasks, variants, tok, corpus_haystack(cfg.data, "val", tok))  # haystack None: words
    # a compiled net's guards include the thread count, which each worker sets to 1 (mc.eval.sweep_workers)
    compiled = cfg.compile.is_on("inference") or cfg.compile.decode != "off"
    rows = read_in_workers(reader, combos, lr.workers, bar,
                           serial_reason="a net is compiled for inference (a one-thread worker would recompile it)"
                           if compiled else "")
    if bar is not None:
        bar.close()
    cells = []
    for task in tasks:
        for length in long_range_lengths(cfg):
            for depth in lr.depths:
                sel = [r for r in rows if (r["task"], r["length"], r["depth"]) == (task, length, depth)]
                for variant in variants:
                    ci = proportion_ci([r["exact"][variant] for r in sel])
                    edits = [r["edits"][variant] for r in sel if variant in r["edits"]]
                    lods = [r["needle_lod"][variant] for r in sel if variant in r["needle_lod"]]
                    cells.append({"task": task, "length": length, "multiple": length // cfg.model.max_seq_len,
                                  "depth": depth, "variant": variant, "accuracy": ci["mean"], "lo": ci["lo"],
                                  "hi": ci["hi"], "n": len(sel),
                                  "edits_per_refocus": (sum(edits) / len(edits)) if edits else None,
                                  # share of documents whose needle the layout holds at LOD0 when the answer starts
                                  "needle_at_lod0": (sum(x == 0 for x in lods) / len(lods)) if lods else None,
                                  # share of documents whose answer was another record's value (a decoy's)
                                  "copied_decoy": (sum(r["copied_decoy"][variant] for r in sel) / len(sel))
                                  if sel else None,
                                  # focused only: share of documents whose refocus kept another path than LensNet's zoom
                                  "other_branch": (sum(r["branch"] > 0 for r in sel) / len(sel))
                                  if variant == "focused" and sel else None})
    return {"base_window": cfg.model.max_seq_len, "budget": budget, "lengths": long_range_lengths(cfg),
            "draw_seed": draw_seed(cfg),
            "depths": list(lr.depths), "depth_jitter": lr.depth_jitter, "tasks": list(tasks), "variants": variants,
            "haystack": rc.haystack, "templates": list(rc.templates), "eval_template": rc.eval_template,
            "compression": {str(n): round(n / budget, 2) for n in long_range_lengths(cfg)},
            "seconds": round(time.time() - t0, 2), "cells": cells, "rows": rows}
