import os, sys, time, types, torch
from mc.build import load_run
from mc.decode import generate, decoder_for
from mc.working_context import bucket_for
torch.set_num_threads(1)
ctrl, tok = load_run(sys.argv[1], overrides=["compile.decode=off"])
dec = decoder_for(ctrl)
prompt = torch.tensor(tok.encode(open("/work/main/bench/results/2026-11-27-cpu-decode-compiled/prompt.txt").read()))
ctrl.begin_session(prompt); generate(ctrl, 40, use_cache=True)
n = len(ctrl.session.wc.entries)
emb = torch.randn(1, 1, ctrl.base.cfg.d_model); cos, sin = dec._plain_row(5)
slots = dec._slots[n - 1:n]; w = bucket_for(n, dec.ladder)
opts = {"size_asserts": False, "alignment_asserts": False} if os.environ.get("NOAS") == "1" else None
f = torch.compile(ctrl.base.forward_cached, fullgraph=True, dynamic=False, options=opts)
args = (emb, cos, sin, dec.cache.k, dec.cache.v, slots, w)
ref = ctrl.base.forward_cached(*args)
out = f(*args); print("maxdiff", float((out - ref).abs().max()))
for _ in range(50): f(*args)
res = []
for r in range(7):
    t = time.perf_counter()
    for _ in range(2000): f(*args)
    res.append((time.perf_counter() - t) / 2000 * 1e6)
res.sort(); print(os.environ.get("EXPLICIT"), os.environ.get("NOAS"), "median", round(res[3], 1), "min", round(res[0], 1), flush=True)
