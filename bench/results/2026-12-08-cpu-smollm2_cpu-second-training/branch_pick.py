"""Which path the branched refocus keeps, and what a margin would keep. For each suite document: LensNet's rank of
the queried needle's gist in its first scoring, the base's fit of the newest tokens under every candidate path
(LensNet's zoom, the zooms of the gists ranked 2..b, the unchanged layout last), the kept path, and whether the
queried needle is at LOD0 after the refocus. Path i >= 1 zooms the gist ranked i + 1, so the queried needle's
path is rank - 1 when its rank is <= b. One JSON line per document.

    python branch_pick.py RUN_DIR DRAW N_PER TASKS MULTS DEPTHS > out.jsonl
"""
import json
import sys

import torch

from mc.build import load_run
from mc.data.hf_tokenizer import tokenizer_for
from mc.data.loader import make_source
from mc.eval.long_range import needle_lod
from mc.eval.read_budget import at_budget
from mc.eval.task_suite import suite_doc

run_dir, draw, n_per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tasks = sys.argv[4].split(",")
mults = [int(x) for x in sys.argv[5].split(",")]
depths = [float(x) for x in sys.argv[6].split(",")]
torch.set_grad_enabled(False)
ctrl, _ = load_run(run_dir, device="cpu", overrides=[f"eval.draw_seed={draw}"] + sys.argv[7:])
ctrl, cfg = at_budget(ctrl, ctrl.cfg, 128)
tok = tokenizer_for(cfg.model)
source = make_source(type(cfg.data)(source="stdlib"), "val", tokenizer=tok)
for task in tasks:
    for mult in mults:
        for depth in depths:
            for k in range(n_per):
                doc = suite_doc(cfg, source, tok, task, mult * 128, depth, k)
                s = ctrl.begin_session(doc.ids)
                lo, hi = doc.needle_spans[0]
                scores = ctrl.session_scores(s)
                gists = sorted((i for i in range(len(s.wc)) if s.wc[i][0] > 0), key=lambda i: -float(scores[i]))
                hit = [r for r, i in enumerate(gists) if s.wc.span(i)[0] < hi and s.wc.span(i)[1] > lo]
                rank = hit[0] + 1 if hit else None
                others = [r + 1 for r, i in enumerate(gists[:8]) if any(
                    s.wc.span(i)[0] < b and s.wc.span(i)[1] > a for a, b in doc.needle_spans[1:])]
                rec = ctrl.refocus()
                print(json.dumps({"task": task, "multiple": mult, "depth": depth, "doc": k, "rank": rank,
                                  "distractor_ranks": others, "fits": [round(f, 3) for f in rec.branch_fits],
                                  "kept": rec.branch, "edits": len(rec.edits),
                                  "needle_lod": needle_lod(ctrl.session.wc, (lo, hi))}), flush=True)
