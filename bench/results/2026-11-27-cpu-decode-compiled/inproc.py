"""In one process, alternating: the decode loop with and without the KV cache, eager and compiled (decode + nets).
Usage: python inproc.py RUN_DIR NEW_TOKENS ROUNDS PROMPT_FILE OUT_JSON (from the repository root, PYTHONPATH=.)."""
import json, sys, time, torch
from mc.build import load_run
from mc.decode import generate, DecodeStats
torch.set_num_threads(1)
run, new, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
prompt_text = open(sys.argv[4]).read()
res = {}
for label, ov in (("eager", []), ("compiled", ["compile.decode=default", "compile.gistnet.inference=default",
                                               "compile.lensnet.inference=default"])):
    ctrl, tok = load_run(run, overrides=ov)
    prompt = torch.tensor(tok.encode(prompt_text))
    def one(cache):
        ctrl.begin_session(prompt); st = DecodeStats()
        ids = generate(ctrl, new, use_cache=cache, stats=st)
        return new / st.decode_s, ids.tolist()
    one(True); one(False)  # warm-up (compiles)
    rows = []
    for r in range(rounds):
        (a, ia), (b, ib) = one(True), one(False)
        rows.append({"cache": a, "nocache": b, "ratio": a / b, "same_tokens": ia == ib})
    res[label] = rows
    print(label, [round(x["ratio"], 2) for x in rows], "same", all(x["same_tokens"] for x in rows))
json.dump(res, open(sys.argv[5], "w"), indent=1)
