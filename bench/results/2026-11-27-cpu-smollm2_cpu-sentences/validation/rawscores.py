"""Probe: LensNet's raw scores (max over gists) on plain text vs recall docs at W=64, and suite docs at W=128."""
import sys, copy, zlib, torch, statistics as st
from mc.build import load_run
from mc.data.hf_tokenizer import tokenizer_for
from mc.data.loader import make_source, RecallSource, corpus_haystack
from mc.data.real_tasks import make_task_doc, filler_window
from mc.eval.task_suite import at_budget, SEED_OFFSET
run = sys.argv[1]
ctrl, tok = load_run(run)
cfg = ctrl.cfg
src = make_source(cfg.data, "val", tokenizer=tok)
rs = RecallSource(cfg.data.recall, "val", tok, haystack=corpus_haystack(cfg.data, "val", tok))
g = torch.Generator().manual_seed(777)
def stats(c, ids):
    s = c.begin_session(ids)
    sc = c._session_scores(s)
    gist = torch.tensor([e[0] > 0 for e in s.wc.entries])
    v = sc[gist]
    return float(v.max()), float(v.mean())
plain = [stats(ctrl, src.sample_batch(1, 224, g)[0]) for _ in range(12)]
rec = []
for k in range(12):
    d = rs.doc(900 + k, seq_len=256)
    rec.append(stats(ctrl, d.ids[:224]))
print("W64 plain max", [round(a, 2) for a, _ in plain], "mean", round(st.mean(b for _, b in plain), 2))
print("W64 recall max", [round(a, 2) for a, _ in rec], "mean", round(st.mean(b for _, b in rec), 2))
cfg2 = copy.deepcopy(cfg); cfg2.eval.tasks.budget = 128
c2, cfg2 = at_budget(ctrl, cfg2)
suite = []
for k in range(6):
    doc = make_task_doc("passkey", 1024, 0.5, SEED_OFFSET + 12345 * 10_000 + k, tok, filler_window(src, 1024, 99 + k))
    suite.append(stats(c2, doc.ids))
plain2 = [stats(c2, src.sample_batch(1, 1024, g)[0]) for _ in range(6)]
print("W128 passkey max", [round(a, 2) for a, _ in suite])
print("W128 plain max", [round(a, 2) for a, _ in plain2])
