"""Per 32-token segment of the session read's tail: focused - compressed, to say which refocus the harm follows."""
import json, runpy, sys
import torch
import mc.eval.streamed as st
import mc.eval.session_read as sr
import mc.eval.evaluate as ev

cur = []
orig_seg = st._segment_losses
def seg(*a, **k):
    out = orig_seg(*a, **k)
    cur.append(out.detach().clone())
    return out
st._segment_losses = seg
orig_wc = st.wc_session_loss
per = {}
def wc(ctrl, tail_ids, **kw):
    cur.clear()
    r = orig_wc(ctrl, tail_ids, **kw)
    per.setdefault("calls", []).append(torch.cat(cur).tolist())
    return r
sr.wc_session_loss = wc
docs = []
orig_sl = sr.session_losses
def sl(ctrl, cfg, ids, name):
    per.clear()
    r = orig_sl(ctrl, cfg, ids, name)
    comp, foc, rnd = per["calls"]
    docs.append({"name": name, "compressed": comp, "focused": foc, "random": rnd, "edits": r["edits"]})
    return r
ev.session_losses = sl
out = sys.argv.pop(1)
sys.argv[0] = "scripts/mc_eval.py"
try:
    runpy.run_path("scripts/mc_eval.py", run_name="__main__")
finally:
    json.dump(docs, open(out, "w"))
