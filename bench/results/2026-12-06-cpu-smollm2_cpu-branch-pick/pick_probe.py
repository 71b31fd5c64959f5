"""Every candidate path of a branched refocus, read on the task suite's documents: its fit and its answer.

    PYTHONPATH=. python pick_probe.py RUN_DIR TASK DRAW N_PER_CELL OUT.json

For each document (the suite's own, W = 128, 8x and 16x, depths 0.1 / 0.5 / 0.9) and each locator (`focused`:
LensNet's scores, `salience`: the suite's lexical rule, both with the run's search), the refocus runs as the suite
runs it; every time it asks the base for a candidate's fit, the probe first decodes the answer under that layout
(restoring the session after) and records: the teacher-forced fit of the newest branch_tail_tokens tokens, the whole
fit (with the lookahead), the answer's score and the queried needle's LOD. The path the refocus kept is recorded too,
so a pick rule (a margin for LensNet's own zoom, the fit without the lookahead) can be replayed offline.
"""
import json
import sys
import time

import torch

from mc.build import load_run
from mc.data.hf_tokenizer import tokenizer_for
from mc.data.loader import make_source
from mc.eval.focus_policies import salience_refocus
from mc.eval.long_range import needle_lod
from mc.eval.read_budget import at_budget
from mc.data.real_tasks import ANSWER_TOKENS, string_match_all
from mc.eval.task_suite import session_greedy, suite_doc
from mc.layout_fit import tail_fit

run_dir, task, draw, n_per, out_path = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
torch.set_grad_enabled(False)
ctrl, _ = load_run(run_dir, device="cpu", overrides=[f"eval.draw_seed={draw}"])
ctrl, cfg = at_budget(ctrl, ctrl.cfg, 128)
tok = tokenizer_for(cfg.model)
source = make_source(type(cfg.data)(source="stdlib"), "val", tokenizer=tok)
inf = cfg.allocator.inference
W = cfg.mc.max_entries
eos = getattr(tok, "eos_id", None)
cur = {}
orig_fit = ctrl._tail_fit


def probing_fit():
    s = ctrl.session
    snap = s.snapshot()
    out = session_greedy(ctrl, ANSWER_TOKENS[task], eos_id=eos)
    s.restore(snap)
    lod = needle_lod(s.wc, cur["span"])
    text = tok.decode(out)
    tf = tail_fit(ctrl, inf.branch_tail_tokens)
    tf_n = {n: tail_fit(ctrl, n) for n in (16, 24, 31)}  # longer teacher-forced tails: the question's first key too
    fit = orig_fit()
    cur["paths"].append({"tf": tf, "fit": fit, "score": string_match_all(text, cur["answers"]), "lod": lod,
                         "text": text[:40], "entries": len(s.wc),
                          "tf_n": tf_n})
    return fit


ctrl._tail_fit = probing_fit
rows, t0 = [], time.time()
for mult in (8, 16):
    for depth in (0.1, 0.5, 0.9):
        for k in range(n_per):
            doc = suite_doc(cfg, source, tok, task, mult * W, depth, k)
            start = ctrl.begin_session(doc.ids).snapshot()
            row = {"multiple": mult, "depth": depth, "doc": k, "answers": list(doc.answers)}
            for loc in ("focused", "salience"):
                ctrl.session.restore(start)
                cur.update(paths=[], span=doc.needle_spans[0], answers=doc.answers)
                if loc == "focused":
                    ctrl.refocus()
                else:
                    salience_refocus(ctrl, (doc.question_start, int(doc.ids.numel())))
                rec = ctrl.session.refocus_log[-1]
                paths = cur["paths"]
                if inf.branch_unchanged and len(paths) > 1:  # the unchanged layout's fit is taken first, ranked last
                    paths = paths[1:] + paths[:1]
                out = session_greedy(ctrl, ANSWER_TOKENS[task], eos_id=eos)
                row[loc] = {"paths": paths, "branch": rec.branch, "edits": len(rec.edits),
                            "score": string_match_all(tok.decode(out), doc.answers),
                            "lod": needle_lod(ctrl.session.wc, doc.needle_spans[0])}
            rows.append(row)
            print(mult, depth, k, {loc: (row[loc]["score"], row[loc]["branch"]) for loc in ("focused", "salience")},
                  f"{time.time() - t0:.0f}s", flush=True)
json.dump({"run": run_dir, "task": task, "draw": draw, "refocus": {k: getattr(inf, k) for k in (
    "branches", "branch_lookahead", "branch_margin", "branch_unchanged", "branch_tail_tokens")}, "rows": rows},
    open(out_path, "w"), indent=1)
