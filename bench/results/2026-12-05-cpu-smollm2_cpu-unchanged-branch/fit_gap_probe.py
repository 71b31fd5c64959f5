"""How much better does the best zoom fit than the unchanged layout, on plain text and on documents with a question?

    PYTHONPATH=. python bench/results/2026-12-05-cpu-smollm2_cpu-unchanged-branch/fit_gap_probe.py RUN_DIR DRAW [OUT.json]

With `allocator.inference.branch_unchanged=true` every refocus fits each zoom path and the unchanged layout
(`RefocusRecord.branch_fits`, the last one the unchanged layout's). Per document: the best zoom's fit minus the
unchanged layout's (nats). Documents: the evaluation's corpus windows and recall documents of draw DRAW at the run's
budget (refocus where the evaluation refocuses: before the 32-token tail, at the recall question), and the task
suite's passkey and multi-key documents of the same draw at W = 128, 8x and 16x, 4 per depth bucket.
"""
import json
import sys

import torch

from mc.build import load_run
from mc.data.loader import make_source
from mc.eval.draws import draw_seed
from mc.eval.evaluate import corpus_eval_docs, recall_eval_docs
from mc.eval.read_budget import at_budget
from mc.eval.task_suite import suite_doc


def task_docs(cfg, tok, draw: int, per_cell: int):
    """The task suite's passkey and multi-key documents of draw ``draw`` at W = 128 (the caller's ``cfg`` is already
    at that budget), 8x and 16x, depths 0.1 / 0.5 / 0.9, ``per_cell`` each: yields ``(kind, ids)``."""
    assert draw_seed(cfg) == draw, "the caller's cfg must read draw DRAW (eval.draw_seed)"
    source = make_source(type(cfg.data)(source="stdlib"), "val", tokenizer=tok)
    for task in ("passkey", "multikey"):
        for mult in (8, 16):
            for depth in (0.1, 0.5, 0.9):
                for k in range(per_cell):
                    doc = suite_doc(cfg, source, tok, task, mult * 128, depth, k)
                    yield f"{task}-{mult}x", doc.ids


def main() -> None:
    run_dir, draw = sys.argv[1], int(sys.argv[2])
    out_path = sys.argv[3] if len(sys.argv) > 3 else None
    torch.set_grad_enabled(False)
    ctrl, tok = load_run(run_dir, device="cpu", overrides=["allocator.inference.branch_unchanged=true",
                                                           f"eval.draw_seed={draw}"])
    cfg = ctrl.cfg
    assert draw_seed(cfg) == draw

    def gap(prompt):
        ctrl.begin_session(prompt)
        fits = ctrl.refocus().branch_fits
        return max(fits[:-1]) - fits[-1] if len(fits) > 1 else None

    rows = []
    corpus, _ = corpus_eval_docs(cfg, cfg.eval.n_docs, cfg.eval.doc_tokens)
    for d in corpus:
        rows.append({"kind": "corpus", "gap": gap(d.ids[:-cfg.eval.tail_tokens])})
    for d in recall_eval_docs(cfg, cfg.eval.n_docs, cfg.eval.doc_tokens):
        rows.append({"kind": "recall", "gap": gap(d.ids[:-cfg.data.recall.value_len])})
    ctrl, cfg = at_budget(ctrl, cfg, 128)
    for kind, ids in task_docs(cfg, tok, draw, 4):
        rows.append({"kind": kind, "gap": gap(ids)})
    if out_path:
        json.dump(rows, open(out_path, "w"), indent=1)
    for kind in dict.fromkeys(r["kind"] for r in rows):
        g = sorted(r["gap"] for r in rows if r["kind"] == kind and r["gap"] is not None)
        print(f"{kind:12s} n={len(g):2d}  best zoom - unchanged (nats): " + " ".join(f"{x:+.1f}" for x in g))


if __name__ == "__main__":
    main()
