"""A/B: the same focused layout, answered with make_room's fallback among cooled groups oldest-first (now) vs the
latest-marked first (LIFO)."""
import json, sys, time
import torch
from mc.allocator import FocusAllocator
from mc.build import load_run
from mc.data.hf_tokenizer import tokenizer_for
from mc.data.loader import make_source
from mc.eval.long_range import needle_lod
from mc.eval.read_budget import at_budget
from mc.data.real_tasks import ANSWER_TOKENS, string_match_all
from mc.eval.task_suite import session_greedy, suite_doc, SINGLE_ANSWER

orig = FocusAllocator.make_room

def lifo_make_room(self, wc, n_new, scores=None):
    K = wc.block_size
    order = {n: k for k, n in enumerate(self._expanded_into)}
    done = []
    while len(wc) + n_new > wc.max_entries:
        best = None
        for i in wc.collapsible():
            blocked = self.collapse_blocked(wc, i)
            latest = max((order.get(wc[j], -1) for j in range(i, min(i + K, len(wc)))), default=-1) if blocked else 0
            key = (blocked, -latest, i)
            if best is None or key < best:
                best = key
        i = best[2]
        lod, idx = wc[i]
        from mc.allocator import Edit
        edit = Edit("collapse", wc[i], i)
        wc.collapse(i)
        self._collapsed_into[(lod + 1, idx // K)] = self.clock
        done.append(edit)
    return done

run_dir, draw, tasks, n_per, out_path = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(','), int(sys.argv[4]), sys.argv[5]
torch.set_grad_enabled(False)
ctrl, _ = load_run(run_dir, device="cpu", overrides=[f"eval.draw_seed={draw}"])
ctrl, cfg = at_budget(ctrl, ctrl.cfg, 128)
tok = tokenizer_for(cfg.model)
source = make_source(type(cfg.data)(source="stdlib"), "val", tokenizer=tok)
W = cfg.mc.max_entries
eos = getattr(tok, "eos_id", None)
rows, t0 = [], time.time()
for task in tasks:
    for mult in (8, 16):
        for depth in (0.1, 0.5, 0.9):
            for k in range(n_per):
                doc = suite_doc(cfg, source, tok, task, mult * W, depth, k)
                n_ans = 1 if task in SINGLE_ANSWER else len(doc.needle_spans)
                spans = list(doc.needle_spans[:n_ans])
                ctrl.begin_session(doc.ids)
                ctrl.refocus()
                snap = ctrl.session.snapshot()
                res = {}
                for name, fn in (("oldest", orig), ("lifo", lifo_make_room)):
                    ctrl.session.restore(snap)
                    FocusAllocator.make_room = fn
                    try:
                        out = session_greedy(ctrl, ANSWER_TOKENS[task], eos_id=eos)
                    finally:
                        FocusAllocator.make_room = orig
                    lod_after = max(needle_lod(ctrl.session.wc, sp) for sp in spans)
                    res[name] = (string_match_all(tok.decode(out), doc.answers), lod_after, tok.decode(out)[:40])
                ctrl.session.restore(snap)
                lod0 = max(needle_lod(ctrl.session.wc, sp) for sp in spans)
                rows.append({"task": task, "mult": mult, "depth": depth, "k": k, "lod_before": lod0, **res})
                print(task, mult, depth, k, "lod", lod0, res["oldest"][:2], res["lifo"][:2],
                      repr(res["oldest"][2]) if res["oldest"][0] != res["lifo"][0] else "", f"[{time.time()-t0:.0f}s]", flush=True)
json.dump(rows, open(out_path, "w"), indent=1)
for task in tasks:
    for m in (8, 16):
        sel = [r for r in rows if r["task"] == task and r["mult"] == m]
        print(task, m, "oldest", sum(r["oldest"][0] for r in sel), "lifo", sum(r["lifo"][0] for r in sel), "of", len(sel))
