"""Which no-edit refocus marks carry recall's help and corpus text's harm? Session read (2048-token documents, 256-token
tail read token by token, refocus every interval) with `focused` under a rule for the marks a refocus that keeps no
edit leaves behind, against `compressed`.

Also prints, for the `keep` sessions, what the token anchor saw at each refocus (did it fire, the top raw token's
score, its lead over the best gist, how far back it lies), by source. Ran at code afa7f2a (before the rule this record
adopts: `scheduled` below is that rule, applied here by a patch).

Rules: keep (afa7f2a), none (drop every new mark), anchor (drop the anchor's), guard (drop the guard's),
scheduled (drop all, scheduled refocuses only), first (drop all, the session's first refocus only).
Usage: python marks_rules.py RUN_DIR DRAW RULE[,RULE...]"""
import sys, time, math
import torch
from mc import controller as cm, refocus as rf
from mc.build import load_run
from mc.eval import streamed
from mc.eval.eval_docs import corpus_eval_docs, recall_eval_docs
from mc.eval.focus_policies import Focus, prefix_session

run_dir, draw, rules = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
ctrl, _ = load_run(run_dir, device=torch.device("cpu"), overrides=["eval.doc_tokens=2048", "eval.session_tail=256",
                                                                    f"eval.draw_seed={draw}"])
cfg = ctrl.cfg
S, every, K = cfg.eval.session_tail, cfg.allocator.inference.refocus_interval, cfg.mc.block_size
corpus, _ = corpus_eval_docs(cfg, cfg.eval.n_docs, cfg.eval.doc_tokens)
docs = corpus + recall_eval_docs(cfg, cfg.eval.n_docs, cfg.eval.doc_tokens)
RULE = ["keep"]
CUR = [""]
seen = {}
real_anchor, real_guard, real_run = rf.token_anchor, rf.suffix_guard_blocks, cm.run_refocus
ANCH = []
def anchor(s, scores):
    a = real_anchor(s, scores)
    wc = s.wc
    raw = [i for i in range(len(wc)) if wc[i][0] == 0 and wc[i][1] < s.num_tokens - s.cfg.mc.recent_tokens]
    top = max(float(scores[i]) for i in raw) if raw else float("nan")
    gb = max((float(scores[i]) for i in range(len(wc)) if wc[i][0] > 0), default=float("-inf"))
    ANCH.append([CUR[0], RULE[0], a is not None, top, gb, s.num_tokens - (wc[a][1] if a is not None else 0)])
    seen["anchor"] = [] if a is None else [s.wc[a][1] // K]
    return a
def guard(s, m):
    g = real_guard(s, m)
    seen["guard"] = list(g)
    return g
rf.token_anchor, rf.suffix_guard_blocks = anchor, guard
stats = {"first_noedit": 0, "sched_noedit": 0}
def run(s, scores_fn, fit_fn, scheduled=False, relaid=False):
    seen.clear()
    first = not s.refocus_log
    before = s.allocator.copy()
    rec = real_run(s, scores_fn, fit_fn, scheduled, relaid)
    rule = RULE[0]
    if rec.edits or rule == "keep" or (rule == "scheduled" and not scheduled) or (rule == "first" and not first):
        return rec
    kinds = {"anchor": ["anchor"], "guard": ["guard"]}.get(rule, ["anchor", "guard"])
    for kind in kinds:
        for b in seen.get(kind, []):
            for j in range(K):
                key = (0, b * K + j)
                if key in before._expanded_into:
                    s.allocator._expanded_into[key] = before._expanded_into[key]
                else:
                    s.allocator._expanded_into.pop(key, None)
    return rec
cm.run_refocus = run
captured = []
real_seg = streamed._segment_losses
def seg(*a, **k):
    out = real_seg(*a, **k); captured.append(out); return out
streamed._segment_losses = seg
def per_token(fn):
    captured.clear(); fn(); v = torch.cat(captured); assert v.numel() == S; return v
t0 = time.time()
res = {r: {"corpus": [], "recall": []} for r in rules}
for doc in docs:
    prefix, tail = doc.ids[:-S], doc.ids[-S:]
    RULE[0] = "keep"; CUR[0] = ""
    prefix_session(ctrl, prefix, focus=Focus("none"))
    comp = per_token(lambda: streamed.wc_session_loss(ctrl, tail))
    for r in rules:
        RULE[0] = r; CUR[0] = doc.source
        prefix_session(ctrl, prefix, focus=Focus("lensnet"))
        foc = per_token(lambda: streamed.wc_session_loss(ctrl, tail, every=every,
                                                         refocus=lambda: len(ctrl.refocus(scheduled=True).edits)))
        res[r][doc.source].append(float((foc - comp).mean()))
print(f"run {run_dir}, draw {draw}, {time.time() - t0:.0f} s")
for r in rules:
    for src, v in res[r].items():
        t = torch.tensor(v); m, h = t.mean().item(), 1.96 * t.std().item() / math.sqrt(len(v))
        print(f"{r:9s} {src:6s} n={len(v)} focused - compressed {m:+.4f} [{m - h:+.4f}, {m + h:+.4f}]")

for src in ("corpus", "recall"):
    rows = [a[:1] + a[2:] for a in ANCH if a[0] == src and a[1] == "keep"]
    fired = [a for a in rows if a[1]]
    print(src, "refocuses", len(rows), "anchor fired", len(fired))
    for name, f in (("top raw", lambda a: a[2]), ("top - gist best", lambda a: a[2] - a[3]), ("distance back", lambda a: a[4])):
        v = sorted(f(a) for a in fired)
        if v: print(f"  {name}: quartiles {v[len(v)//4]:.2f} {v[len(v)//2]:.2f} {v[3*len(v)//4]:.2f} min {v[0]:.2f} max {v[-1]:.2f}")
