"""A record of the probe behind this folder's README (not a tool): python probe.py EVAL_JSON RUN_DIR > probe.txt
Reads again, with EVAL_JSON's draw, every depth-0.98 document of an honest-grid sweep that recency or compressed read
and focused did not (BAD), and every 12th document at depths 0.1 / 0.5 that focused read and compressed did not (GOOD),
printing per document the fit (tail + lookahead, nats) and the lookahead part alone of the unchanged layout and of
the path the refocus kept."""
import json, sys, torch
torch.set_num_threads(2)
from mc.build import load_run
from mc.eval import long_range as L
from mc.eval.read_budget import at_budget
from mc.data.loader import corpus_haystack
from mc.config import LONG_RANGE_VARIANTS
import mc.refocus as R
ev = json.load(open(sys.argv[1]))["long_range"]
bad = [r for r in ev["rows"] if r["depth"] == 0.98 and (r["exact"]["recency"] or r["exact"]["compressed"]) and not r["exact"]["focused"]]
good = [r for r in ev["rows"] if r["depth"] in (0.1, 0.5) and r["exact"]["focused"] and not r["exact"]["compressed"]][::12]
ctrl, tok = load_run(sys.argv[2], overrides=[f"eval.draw_seed={ev['draw_seed']}", "eval.long_range.depth_jitter=0"])
cfg = ctrl.cfg
ctrl, cfg = at_budget(ctrl, cfg, cfg.eval.long_range.budget)
fits = []
pairs = {}
import mc.controller as C
aheads = []
_la = C.lookahead_fit
def la(*a, **k):
    v = _la(*a, **k); aheads.append(v); return v
C.lookahead_fit = la
orig = R._once_per_layout
def spy(s, fn):
    f = orig(s, fn)
    def g():
        n = len(aheads); v = f(); fits.append(v)
        if len(aheads) > n: pairs[v] = aheads[-1]
        return v
    return g
R._once_per_layout = spy
r = L._DocReader(ctrl, cfg, L.sweep_tasks(cfg), ["compressed", "focused"], tok, corpus_haystack(cfg.data, "val", tok))
for label, rows in (("BAD", bad), ("GOOD", good)):
    for row in rows:
        fits.clear(); aheads.clear()
        out = r((row["task"], row["length"], row["depth"], row["doc"]))
        rec = ctrl.session.refocus_log[-1]
        bf = rec.branch_fits
        print(label, row["task"], row["length"]//128, row["doc"], "ans", out["answer"], "said", out["said"], "branch", rec.branch, "of", len(bf),
              "unchanged %.2f (ahead %.2f) kept %.2f (ahead %.2f)" % (bf[-1], aheads[0], bf[rec.branch], pairs[bf[rec.branch]]))
