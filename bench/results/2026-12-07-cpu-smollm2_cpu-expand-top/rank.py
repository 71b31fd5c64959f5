"""Rank of the needle's coarse gist among the starting layout's gists: LensNet's first scores vs salience's."""
import sys, time
import torch
from mc.build import load_run
from mc.data.hf_tokenizer import tokenizer_for
from mc.data.loader import make_source
from mc.eval.read_budget import at_budget
from mc.eval.task_suite import suite_doc
from mc.eval.focus_policies import salience_scores

run_dir, draw, n_per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
mults = [int(x) for x in sys.argv[4].split(',')]; depths = [float(x) for x in sys.argv[5].split(',')]
torch.set_grad_enabled(False)
ctrl, _ = load_run(run_dir, device="cpu", overrides=[f"eval.draw_seed={draw}"] + sys.argv[6:])
ctrl, cfg = at_budget(ctrl, ctrl.cfg, 128)
tok = tokenizer_for(cfg.model)
source = make_source(type(cfg.data)(source="stdlib"), "val", tokenizer=tok)
def rank(scores, wc, lo, hi):
    gists = sorted((i for i in range(len(wc)) if wc[i][0] > 0), key=lambda i: -float(scores[i]))
    hit = [r for r, i in enumerate(gists) if wc.span(i)[0] < hi and wc.span(i)[1] > lo]
    return (min(hit) + 1 if hit else None), len(gists)
for mult in mults:
    for depth in depths:
        rl, rs = [], []
        for k in range(n_per):
            doc = suite_doc(cfg, source, tok, "passkey", mult * 128, depth, k)
            s = ctrl.begin_session(doc.ids)
            lo, hi = doc.needle_spans[0]
            a, n = rank(ctrl.session_scores(s), s.wc, lo, hi)
            b, _ = rank(salience_scores(s, (doc.question_start, int(doc.ids.numel()))), s.wc, lo, hi)
            rl.append(a); rs.append(b)
        print(f"{mult}x d{depth}: gists {n}; lensnet ranks {rl}; salience ranks {rs}", flush=True)
