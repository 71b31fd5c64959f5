"""Does a refocus that makes no edit still change a session? For each corpus document of the session read whose
prefix-end refocus kept no edit: how many cooldown marks it left (the token anchor's and suffix guard's, set before
the paths are weighed) and where the layout over the first 64 tail tokens, appended one at a time, first differs from
that of a session never refocused.

Usage (from the repository root): python marks_check.py RUN_DIR DRAW"""
import sys, torch
from mc.build import load_run
from mc.eval.eval_docs import corpus_eval_docs
from mc.eval.focus_policies import Focus, prefix_session
run_dir, draw = sys.argv[1], int(sys.argv[2])
ctrl, _ = load_run(run_dir, device=torch.device("cpu"), overrides=["eval.doc_tokens=2048", "eval.session_tail=256", f"eval.draw_seed={draw}"])
cfg = ctrl.cfg; S = 256
corpus, _ = corpus_eval_docs(cfg, cfg.eval.n_docs, cfg.eval.doc_tokens)
n_noedit = n_marks = n_diverge = 0
for doc in corpus:
    prefix, tail = doc.ids[:-S], doc.ids[-S:]
    _, _, e = prefix_session(ctrl, prefix, focus=Focus("lensnet"))
    if e:
        continue
    n_noedit += 1
    s = ctrl.session
    marks = len(s.allocator._expanded_into) + len(s.allocator._collapsed_into)
    n_marks += marks > 0
    a = []
    for t in tail[:64]:
        ctrl.append(t.view(1), refocus=False); a.append(s.wc.entries)
    prefix_session(ctrl, prefix, focus=Focus("none"))
    b = []
    for t in tail[:64]:
        ctrl.append(t.view(1), refocus=False); b.append(ctrl.session.wc.entries)
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    n_diverge += first is not None
    print(doc.name, "marks", marks, "layouts diverge at tail token", first)
print("no-edit docs", n_noedit, "with marks", n_marks, "diverging within 64 tokens", n_diverge)
