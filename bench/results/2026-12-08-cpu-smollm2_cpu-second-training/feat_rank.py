"""Does the depth-0.9 rank drop come from LensNet's linear distance feature (gap / history) leaving the range
records had in training? Prints (1) the answer record's gap share in stage-2 training documents, (2) the needle
gist's features in suite documents, (3) LensNet's rank of the needle gist as trained and with the linear feature
of every gist clamped up to a floor (a read-time counterfactual, not a fix)."""
import sys
import torch
from mc.build import load_run
from mc.data.hf_tokenizer import tokenizer_for
from mc.data.loader import make_source
from mc.eval.read_budget import at_budget
from mc.eval.task_suite import suite_doc
from mc.nets.lensnet import LensNet

run_dir, draw, n_per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
mults = [int(x) for x in sys.argv[4].split(',')]; depths = [float(x) for x in sys.argv[5].split(',')]
floors = [float(x) for x in sys.argv[6].split(",")]
torch.set_grad_enabled(False)
orig = LensNet.features
STATE = {"floor": None}
def patched(self, mask, positions, lods, num_tokens):
    f = orig(self, mask, positions, lods, num_tokens)
    if STATE["floor"] is None:
        return f
    lin = torch.where(lods > 0, f[..., 2].clamp(min=STATE["floor"]), f[..., 2])
    return torch.cat([f[..., :2], lin.unsqueeze(-1), f[..., 3:]], dim=-1) * mask.unsqueeze(-1)
LensNet.features = patched
ctrl, _ = load_run(run_dir, device="cpu", overrides=[f"eval.draw_seed={draw}"])
# (1) training documents: the answer record's gap share
from mc.data.recall import make_recall_doc
from mc.data.loader import corpus_haystack
cfg0 = ctrl.cfg
tok = tokenizer_for(cfg0.model)
rc = cfg0.data.recall
HAY = corpus_haystack(cfg0.data, "train", tokenizer=tok)
shares = []
for seed in range(400):
    d = make_recall_doc(rc, 10_000 + seed, tok, HAY)
    lo, hi = d.record_spans[d.answer_record]
    shares.append((len(d.ids) - hi) / len(d.ids))
shares.sort()
q = lambda p: shares[int(p * (len(shares) - 1))]
print(f"training records (doc_tokens {rc.doc_tokens}, records_region {rc.records_region}): answer record's gap share "
      f"min {shares[0]:.3f} p05 {q(0.05):.3f} p50 {q(0.5):.3f} max {shares[-1]:.3f}", flush=True)
ctrl, cfg = at_budget(ctrl, cfg0, 128)
source = make_source(type(cfg.data)(source="stdlib"), "val", tokenizer=tok)
def needle_rank(scores, wc, lo, hi):
    gists = sorted((i for i in range(len(wc)) if wc[i][0] > 0), key=lambda i: -float(scores[i]))
    hit = [(r, i) for r, i in enumerate(gists) if wc.span(i)[0] < hi and wc.span(i)[1] > lo]
    return (hit[0][0] + 1, hit[0][1]) if hit else (None, None)
for mult in mults:
    for depth in depths:
        r0, r1, lins = [], [], []
        for k in range(n_per):
            doc = suite_doc(cfg, source, tok, "passkey", mult * 128, depth, k)
            s = ctrl.begin_session(doc.ids)
            lo, hi = doc.needle_spans[0]
            STATE["floor"] = None
            a, i = needle_rank(ctrl.session_scores(s), s.wc, lo, hi)
            b = []
            for fl in floors:
                STATE["floor"] = fl
                b.append(needle_rank(ctrl.session_scores(s), s.wc, lo, hi)[0])
            if i is not None:
                st, en = s.wc.span(i)
                lins.append((s.num_tokens - en) / s.num_tokens)
            r0.append(a); r1.append(b)
        lin = f"{min(lins):.3f}-{max(lins):.3f}" if lins else "-"
        print(f"{mult}x d{depth}: needle gist gap share {lin}; ranks as trained {r0}; " + "; ".join(f"floor {fl}: {[x[j] for x in r1]}" for j, fl in enumerate(floors)) + "", flush=True)
