"""Does the stage-1 base copy a record that sits right before the question? Raw reads only (lod0_answer): 24
documents per depth on the draw given, 128-token documents read whole and 512-token (4x) ones by their last 112 tokens.
Usage (from the repository root): python adjacent.py RUN_DIR DRAW"""
import sys, torch
from mc.build import load_run
from mc.data.long_tasks import make_long_doc
from mc.data.loader import corpus_haystack
from mc.eval.baselines import lod0_answer
torch.set_num_threads(2)
run, draw = sys.argv[1], int(sys.argv[2])
ctrl, tok = load_run(run)
cfg = ctrl.cfg
rc = cfg.data.recall
hay = corpus_haystack(cfg.data, "val", tok)
N = 24
for task in ("passkey", "multi_needle"):
    for length, window in ((128, 128), (512, 112)):
        line = []
        for depth in (0.1, 0.5, 0.8, 0.9, 0.95, 0.98, 1.0):
            ok = dist = 0
            for k in range(N):
                seed = draw * 10_000 + k
                doc = make_long_doc(task, length, depth, seed, key_len=rc.key_len, value_len=rc.value_len, n_needles=4,
                                    tokenizer=tok, template=rc.templates[k % len(rc.templates)], haystack=hay,
                                    near_decoys=rc.near_decoys, exclude=[rc.eval_template])
                if length - doc.queried_span[0] > window: continue
                r = lod0_answer(ctrl.base, doc.ids, window=window, value_len=rc.value_len)
                ok += r["exact"]; dist += 1
            line.append(f"d{depth}: {ok}/{dist}")
        print(f"{task:13s} L{length} W{window}  " + "  ".join(line), flush=True)
