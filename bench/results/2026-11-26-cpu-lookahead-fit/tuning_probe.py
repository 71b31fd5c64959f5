import sys, torch, json
from mc.build import load_run
from mc.data.long_tasks import make_long_doc
from mc.data.loader import corpus_haystack
from mc.eval.long_range import needle_lod, SEED_OFFSET
run = sys.argv[1]; length=int(sys.argv[2]); depth=float(sys.argv[3]); task=sys.argv[4]; ndocs=int(sys.argv[5])
ctrl, tok = load_run(run)
cfg = ctrl.cfg; rc = cfg.data.recall
hay = corpus_haystack(cfg.data, "val", tok)
orig_fit = ctrl._tail_fit
log = []
def fit():
    s = ctrl.session
    f = orig_fit()
    lp = torch.log_softmax(ctrl.next_token_logits().float(), -1)
    conf = float(lp.max())
    snap = s.snapshot()
    out = []; c3 = 0.0
    for _ in range(rc.value_len):
        l2 = torch.log_softmax(ctrl.next_token_logits().float(), -1)
        t = int(l2.argmax()); c3 += float(l2[t]); out.append(t); ctrl.append(torch.tensor([t]), refocus=False)
    s.restore(snap)
    log.append((f, c3, out, needle_lod(s.wc, SPAN[0]))); OUTS.append(tok.decode(out))
    return f
ctrl._tail_fit = fit
SPAN=[None]; OUTS=[]
res=[]
for k in range(ndocs):
    seed = SEED_OFFSET + 4242*10000 + k
    doc = make_long_doc(task, length, depth, seed, key_len=rc.key_len, value_len=rc.value_len, n_needles=cfg.eval.long_range.n_needles,
        tokenizer=tok, template=rc.templates[k % len(rc.templates)], haystack=hay, near_decoys=rc.near_decoys)
    SPAN[0]=doc.queried_span
    ans = doc.ids[-rc.value_len:].tolist()
    s = ctrl.begin_session(doc.ids[:-rc.value_len])
    log.clear()
    rec = ctrl.refocus()
    # log order: start_fit first (computed before zoom), then zoom, branches
    paths = log[1:] + log[:1]  # zoom, branches..., unchanged (matching branch_fits order)
    rows = [dict(fit=round(f,2), conf=round(c,3), ok=(o==ans), lod=l) for f,c,o,l in paths]
    res.append(dict(k=k, kept=rec.branch, rows=rows))
    print(repr(tok.decode(ans)), OUTS[:1], OUTS[-1:]); OUTS.clear()
    print(k, "kept", rec.branch, " ".join(f"[{r['fit']:.1f} {r['conf']:.2f} {'Y' if r['ok'] else '.'}{r['lod']}]" for r in rows), flush=True)
json.dump(res, open(sys.argv[6],'w'))
