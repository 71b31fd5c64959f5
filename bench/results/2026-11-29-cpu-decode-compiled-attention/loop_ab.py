"""In one process, round-robin: the compiled decode loop with SDPA (A) vs the written-out attention (B), and no cache."""
import os, sys, time, types, json, statistics, torch
from mc.build import load_run
from mc.decode import generate, DecodeStats, decoder_for
torch.set_num_threads(1)
run, new, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ctrl, tok = load_run(run, overrides=["compile.decode=default", "compile.gistnet.inference=default", "compile.lensnet.inference=default"])
prompt = torch.tensor(tok.encode(open("/work/main/bench/results/2026-11-27-cpu-decode-compiled/prompt.txt").read()))
dec = decoder_for(ctrl)
def private(fn):
    f = fn.__func__
    g = types.FunctionType(f.__code__.replace(), f.__globals__, f.__name__, f.__defaults__, f.__closure__)
    return types.MethodType(g, fn.__self__)
sets = {}
for name in ("A", "B"):
    sets[name] = (torch.compile(private(ctrl.base.forward_cached), fullgraph=True, dynamic=False),
                  torch.compile(private(dec._suffix), fullgraph=True, dynamic=None))
def use(name):
    os.environ["EXPLICIT"] = "1" if name == "B" else "0"
    dec._step, dec._suffix_step = sets[name]
def one(name, cache=True):
    if name: use(name)
    ctrl.begin_session(prompt); st = DecodeStats()
    ids = generate(ctrl, new, use_cache=cache, stats=st)
    return new / st.decode_s, ids.tolist()
for name in ("A", "B"):
    one(name); one(name)
one(None, cache=False)
res = {"A": [], "B": [], "nocache": []}; same = True
for r in range(rounds):
    for name in (("A", "B") if r % 2 == 0 else ("B", "A")):
        tps, ids = one(name); res[name].append(tps)
    tps, ids0 = one(None, cache=False); res["nocache"].append(tps)
print({k: [round(x) for x in v] for k, v in res.items()})
print({k: round(statistics.median(v)) for k, v in res.items()}, "B/A per round", [round(b / a, 3) for a, b in zip(res["A"], res["B"])])
json.dump(res, open(sys.argv[4], "w"))
