"""Log every refocus's fits (kept path vs the unchanged layout) during an mc_eval run."""
import json, runpy, sys
import mc.refocus as rf
import mc.controller as mcc

log = []
orig = rf.run_refocus
def hooked(s, scores_fn, tail_fit_fn, scheduled=False, relaid=False):
    rec = orig(s, scores_fn, tail_fit_fn, scheduled=scheduled, relaid=relaid)
    log.append({"scheduled": scheduled, "n": s.num_tokens, "fits": list(rec.branch_fits), "branch": rec.branch,
                "edits": len(rec.edits)})
    return rec
rf.run_refocus = hooked
mcc.run_refocus = hooked
out = sys.argv.pop(1)
sys.argv[0] = "scripts/mc_eval.py"
try:
    runpy.run_path("scripts/mc_eval.py", run_name="__main__")
finally:
    json.dump(log, open(out, "w"))
