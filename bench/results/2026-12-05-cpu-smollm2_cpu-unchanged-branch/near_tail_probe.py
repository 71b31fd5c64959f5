"""How much raw text sits right before the scored tail, compressed vs focused, on the evaluation's corpus documents.

    PYTHONPATH=. python bench/results/2026-12-05-cpu-smollm2_cpu-unchanged-branch/near_tail_probe.py RUN_DIR DRAW [OVERRIDE ...]

The evaluation's corpus tail loss (`mc/eval/evaluate.py`, `wc_tail_loss`) builds the working context over the prefix,
refocuses (focused) or not (compressed), appends the 32-token tail (the session makes room) and scores the tail under
that final layout. Per document and variant: the raw (LOD0) tokens directly before the tail in the final layout, and
the raw tokens anywhere before the tail. No base forward for the compressed variant; the focused one refocuses as
the evaluation does (its branch fits call the base).
"""
import sys

import torch

from mc.build import load_run
from mc.eval.evaluate import corpus_eval_docs

run_dir, draw, overrides = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
torch.set_grad_enabled(False)
ctrl, tok = load_run(run_dir, device="cpu", overrides=[f"eval.draw_seed={draw}", *overrides])
cfg = ctrl.cfg
T = cfg.eval.tail_tokens


def raw_before_tail(prefix, tail, refocus):
    s = ctrl.begin_session(prefix)
    edits = len(ctrl.refocus().edits) if refocus else 0
    ctrl.append(tail, refocus=False)
    lods = [lod for lod, _ in s.wc.entries]
    before = lods[: len(lods) - T]
    run = 0
    for lod in reversed(before):
        if lod != 0:
            break
        run += 1
    return run, sum(1 for lod in before if lod == 0), edits


docs, _ = corpus_eval_docs(cfg, cfg.eval.n_docs, cfg.eval.doc_tokens)
print("doc  compressed: raw run before tail / raw before tail   focused: same (edits)")
tot = [0, 0, 0, 0]
for i, d in enumerate(docs):
    c = raw_before_tail(d.ids[:-T], d.ids[-T:], False)
    f = raw_before_tail(d.ids[:-T], d.ids[-T:], True)
    tot = [tot[0] + c[0], tot[1] + c[1], tot[2] + f[0], tot[3] + f[1]]
    print(f"{i:3d}  {c[0]:3d} / {c[1]:3d}        {f[0]:3d} / {f[1]:3d} ({f[2]} edits)")
n = len(docs)
print(f"mean compressed {tot[0] / n:.1f} / {tot[1] / n:.1f}   focused {tot[2] / n:.1f} / {tot[3] / n:.1f}")
