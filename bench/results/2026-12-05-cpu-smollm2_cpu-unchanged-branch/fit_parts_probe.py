"""Each refocus candidate's fit split in two: the newest tokens' teacher-forced log-likelihood and the lookahead's.

    PYTHONPATH=. python bench/results/2026-12-05-cpu-smollm2_cpu-unchanged-branch/fit_parts_probe.py RUN_DIR DRAW OUT.json

With `allocator.inference.branch_unchanged=true` every refocus fits each zoom path, then the unchanged layout (last).
Per document and candidate: `tf` (log-likelihood of the newest branch_tail_tokens tokens, teacher forced) and `ahead`
(the base's greedy continuation's, branch_lookahead tokens). Documents as in fit_gap_probe.py (the evaluation's corpus
and recall documents of draw DRAW; passkey and multi-key at W = 128, 8x and 16x, depths 0.1/0.5/0.9, 2 each).
"""
import json
import sys

import torch

import mc.controller as controller_mod
from fit_gap_probe import task_docs  # this folder's sibling probe: the same task documents
from mc.build import load_run
from mc.eval.evaluate import corpus_eval_docs, recall_eval_docs
from mc.eval.read_budget import at_budget

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
for i, (kind, ids) in enumerate(task_docs(cfg, tok, draw, 2)):
    rows.append({"kind": kind, **candidates(ids)})
    if i % 6 == 5:  # the rows so far survive a stopped probe
        json.dump(rows, open(out_path, "w"), indent=1)
json.dump(rows, open(out_path, "w"), indent=1)
print("written", out_path, len(rows))
