"""A record of how the inference-side check was made (not a tool): python index_at_inference.py RUN_DIR [DRAW]
24 multi-needle documents at 16x the window (validation draw 51515 by default; the run's templates, haystack and
near-miss decoys), the question's prompt without the answer: where the token index's largest match over the
history falls (the queried record, a decoy record, elsewhere) and the pool's mean weights over the tail."""
import sys, torch
from mc.build import load_run
from mc.data.long_tasks import make_long_doc
from mc.data.loader import corpus_haystack
from mc.data.hf_tokenizer import tokenizer_for
from mc.nets.token_index import SessionKeys
run = sys.argv[1]; draw = int(sys.argv[2]) if len(sys.argv) > 2 else 51515
ctrl, tok = load_run(run)
cfg = ctrl.cfg; rc = cfg.data.recall; mc = cfg.mc
idx = ctrl.lensnet.index
hay = corpus_haystack(cfg.data, "val", tok)
W = cfg.model.max_seq_len
torch.manual_seed(0)
stats = {"top_in_q": 0, "top_in_decoy": 0, "q_beats_decoys": 0, "n": 0}
poolw = torch.zeros(mc.recent_tokens)
for k in range(24):
    tmpl = rc.templates[k % len(rc.templates)]
    doc = make_long_doc("multi_needle", 16 * W, 0.5, draw * 10 + k, key_len=rc.key_len, value_len=rc.value_len,
                        n_needles=4, tokenizer=tok, template=tmpl, haystack=hay, near_decoys=rc.near_decoys,
                        exclude=[rc.eval_template] if rc.eval_template else ())
    ids = doc.ids[:-rc.value_len]
    s = ctrl.begin_session(ids)
    with torch.no_grad():
        feats, keys = SessionKeys().update(idx, s.history(), s.tree.level(0))
        tail = feats[None, -mc.recent_tokens:]
        w = torch.softmax(idx.pool(tail).squeeze(-1), -1)[0]; poolw += w
        q = idx.pooled_query(tail)[0]
        m = idx.match(keys[None], q[None])[0]
    hist = m[: doc.query_start]
    top = int(hist.argmax())
    spans = doc.record_spans
    inq = spans[0][0] <= top < spans[0][1] + 2
    indec = any(a <= top < b + 2 for a, b in spans[1:])
    rmax = [float(hist[a:b + 2].max()) for a, b in spans]
    stats["n"] += 1; stats["top_in_q"] += inq; stats["top_in_decoy"] += indec
    stats["q_beats_decoys"] += rmax[0] > max(rmax[1:])
    if k < 3:
        a, b = spans[0]
        print(repr(tok.decode(doc.ids[a:b+1])), [round(x, 2) for x in rmax], 'filler max', round(float(hist.max()),2), 'mean', round(float(hist.mean()),2))
        print('  per-token q record:', [round(float(x),1) for x in hist[a:b+2]])
        print('  tail', repr(tok.decode(ids[-mc.recent_tokens:])))
print(stats)
print('pool weights (last 16):', [round(float(x), 3) for x in (poolw / 24)[-16:]])
print('gain', float(ctrl.lensnet.index_gain.detach()))
