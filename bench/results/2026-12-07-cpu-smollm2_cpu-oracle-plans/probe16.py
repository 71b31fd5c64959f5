"""Probe: where the focused refocus's candidate paths leave the passkey needle (16x, depth 0.1) vs the oracle."""
import json, sys, time
import torch
from mc.build import load_run
from mc.data.hf_tokenizer import tokenizer_for
from mc.data.loader import make_source
from mc.eval.long_range import needle_lod
from mc.eval.read_budget import at_budget
from mc.data.real_tasks import ANSWER_TOKENS, string_match_all
from mc.eval.task_suite import session_greedy, suite_doc
from mc.eval.focus_policies import multi_span_oracle_refocus

run_dir, draw, n_per, mults, depths, out_path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    [int(x) for x in sys.argv[4].split(',')], [float(x) for x in sys.argv[5].split(',')], sys.argv[6]
overrides = [f"eval.draw_seed={draw}"] + sys.argv[7:]
torch.set_grad_enabled(False)
ctrl, _ = load_run(run_dir, device="cpu", overrides=overrides)
ctrl, cfg = at_budget(ctrl, ctrl.cfg, 128)
tok = tokenizer_for(cfg.model)
source = make_source(type(cfg.data)(source="stdlib"), "val", tokenizer=tok)
inf = cfg.allocator.inference
W = cfg.mc.max_entries
eos = getattr(tok, "eos_id", None)
task = "passkey"
cur = {}
orig_fit = ctrl._tail_fit

def tok_lods(wc, lo, hi):
    out = []
    for t in range(lo, hi):
        for i in range(len(wc)):
            a, b = wc.span(i)
            if a <= t < b:
                out.append(wc[i][0]); break
    return out

def probing_fit():
    s = ctrl.session
    snap = s.snapshot()
    out = session_greedy(ctrl, ANSWER_TOKENS[task], eos_id=eos)
    s.restore(snap)
    fit = orig_fit()
    lo, hi = cur["span"]
    cur["paths"].append({"fit": fit, "score": string_match_all(tok.decode(out), cur["answers"]),
                         "lods": "".join(map(str, tok_lods(s.wc, lo, hi))), "text": tok.decode(out)[:30]})
    return fit

ctrl._tail_fit = probing_fit
rows, t0 = [], time.time()
for mult in mults:
    for depth in depths:
        for k in range(int(__import__("os").environ.get("K0", "0")), n_per):
            doc = suite_doc(cfg, source, tok, task, mult * W, depth, k)
            start = ctrl.begin_session(doc.ids).snapshot()
            lo, hi = doc.needle_spans[0]
            cur.update(paths=[], span=(lo, hi), answers=doc.answers)
            rec = ctrl.refocus()
            paths = cur["paths"]
            out = session_greedy(ctrl, ANSWER_TOKENS[task], eos_id=eos)
            fscore = string_match_all(tok.decode(out), doc.answers)
            flods = "".join(map(str, tok_lods(ctrl.session.wc, lo, hi)))
            edits = [(e.kind, tuple(e.entry)) for e in rec.edits]
            ctrl.session.restore(start)
            cur["paths"] = []
            oe = multi_span_oracle_refocus(ctrl, [doc.needle_spans[0]], core=[doc.answer_spans[0]],
                                           question=(doc.question_start, int(doc.ids.numel())), rest="neighbours")
            oout = session_greedy(ctrl, ANSWER_TOKENS[task], eos_id=eos)
            oscore = string_match_all(tok.decode(oout), doc.answers)
            olods = "".join(map(str, tok_lods(ctrl.session.wc, lo, hi)))
            row = {"mult": mult, "depth": depth, "doc": k, "span": [lo, hi], "ans": list(doc.answer_spans[0]),
                   "focused": fscore, "flods": flods, "branch": rec.branch, "edits": edits, "paths": paths,
                   "oracle": oscore, "olods": olods, "oedits": oe}
            rows.append(row)
            print(f"{mult}x d{depth} k{k} span {lo}-{hi} F={fscore} {flods} branch={rec.branch} "
                  f"O={oscore} {olods} paths={[(p['score'], p['lods'], round(p['fit'],1)) for p in paths]} "
                  f"[{time.time()-t0:.0f}s]", flush=True)
json.dump(rows, open(out_path, "w"), indent=1)
