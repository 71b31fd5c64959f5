"""Each refocus candidate's fit split in two: the newest tokens' teacher-forced log-likelihood and the lookahead's.

    PYTHONPATH=. python bench/results/2026-12-05-cpu-smollm2_cpu-unchanged-branch/fit_parts_probe.py RUN_DIR DRAW OUT.json

With `allocator.inference.branch_unchanged=true` every refocus fits each zoom path, then the unchanged layout (last).
Per document and candidate: `tf` (log-likelihood of the newest branch_tail_tokens tokens, teacher forced) and `ahead`
(the base's greedy continuation's, branch_lookahead tokens). Documents as in fit_gap_probe.py (the evaluation's corpus
and recall documents of draw DRAW; passkey and multi-key at W = 128, 8x and 16x, depths 0.1/0.5/0.9, 2 each).
"""
import json
import sys
import zlib

import torch

from mc.build import load_run
from mc.data.loader import make_source
from mc.data.real_tasks import filler_window, make_task_doc
from mc.eval.evaluate import corpus_eval_docs, recall_eval_docs
from mc.eval.long_range import needle_depth
from mc.eval.read_budget import at_budget
from mc.eval.task_suite import SEED_OFFSET
from mc.refocus import lookahead_fit
import mc.controller as controller_mod

run_dir, draw, out_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
torch.set_grad_enabled(False)
parts: list[tuple[float, float]] = []
real_lookahead = controller_mod.lookahead_fit


def recording_lookahead(*a, **k):
    ahead = real_lookahead(*a, **k)
    parts.append([None, ahead])
    return ahead


controller_mod.lookahead_fit = recording_lookahead


def fit_parts(ctrl):
    real = type(ctrl)._tail_fit

    def patched(self):
        total = real(self)
        parts[-1][0] = total - parts[-1][1]
        return total
    type(ctrl)._tail_fit = patched


ctrl, tok = load_run(run_dir, device="cpu", overrides=["allocator.inference.branch_unchanged=true",
                                                       f"eval.draw_seed={draw}"])
fit_parts(ctrl)
cfg = ctrl.cfg


def candidates(prompt):
    parts.clear()
    ctrl.begin_session(prompt)
    rec = ctrl.refocus()
    return {"parts": [list(p) for p in parts], "kept": rec.branch}


rows = []
corpus, _ = corpus_eval_docs(cfg, cfg.eval.n_docs, cfg.eval.doc_tokens)
for d in corpus:
    rows.append({"kind": "corpus", **candidates(d.ids[:-cfg.eval.tail_tokens])})
for d in recall_eval_docs(cfg, cfg.eval.n_docs, cfg.eval.doc_tokens):
    rows.append({"kind": "recall", **candidates(d.ids[:-cfg.data.recall.value_len])})
ctrl, cfg = at_budget(ctrl, cfg, 128)  # same class: the patched fit holds
source = make_source(type(cfg.data)(source="stdlib"), "val", tokenizer=tok)
ts = cfg.eval.tasks
for task in ("passkey", "multikey"):
    for mult in (8, 16):
        for depth in (0.1, 0.5, 0.9):
            for k in range(2):
                length = mult * 128
                seed = SEED_OFFSET + draw * 10_000 + k
                cs = zlib.crc32(repr((task, length, round(depth, 6), seed)).encode())
                doc = make_task_doc(task, length, needle_depth(depth, ts.depth_jitter, seed), seed, tok,
                                    filler_window(source, length, cs), n_keys=ts.n_keys, hops=ts.hops)
                rows.append({"kind": f"{task}-{mult}x", **candidates(doc.ids)})
        json.dump(rows, open(out_path, "w"), indent=1)
json.dump(rows, open(out_path, "w"), indent=1)
print("written", out_path, len(rows))
