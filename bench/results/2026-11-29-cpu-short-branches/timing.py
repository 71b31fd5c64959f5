"""Seconds per sweep document by history length, with and without allocator.inference.branch_max_tokens=1536, and
the sweep with 1 or 2 workers (obsidian Focus Allocator, "Short histories branch"; Evaluation, "Sweep workers").
Usage (from a copy of the repository): python timing.py RUN_DIR {per-length ARM | workers N OUT_JSON}; ARM all|short.
Run one at a time: the machine's two cores are the measurement."""
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))
import mc.eval.long_range as lr  # noqa: E402
from mc.build import load_run  # noqa: E402

run_dir, mode = sys.argv[1], sys.argv[2]
if mode == "per-length":  # one document per (task, length, depth) at 4x-256x, draw 778
    ov = ["eval.long_range.multiples=[4,16,32,64,128,256]", "eval.long_range.dense_multiples=[]",
          "eval.long_range.n_per_cell=1", "eval.draw_seed=778"]
    if sys.argv[3] == "short":
        ov.append("allocator.inference.branch_max_tokens=1536")
    stamps, make = [], lr.make_long_doc
    lr.make_long_doc = lambda task, length, *a, **k: stamps.append((length, time.time())) or make(task, length, *a, **k)
    ctrl, _ = load_run(run_dir, overrides=ov)
    t = time.time()
    lr.run_long_range(ctrl, ctrl.cfg)
    stamps.append((None, time.time()))
    per = defaultdict(list)
    for (n, a), (_, b) in zip(stamps, stamps[1:]):
        per[n].append(b - a)
    print(sys.argv[3], round(time.time() - t, 1), {n // 128: round(sum(v) / len(v), 3) for n, v in per.items()})
else:  # two documents per cell at 4x / 16x / 64x / 256x, draw 777, N workers; the rows go to OUT_JSON to compare
    ov = ["eval.long_range.multiples=[4,16,64,256]", "eval.long_range.dense_multiples=[]", "eval.long_range.n_per_cell=2",
          "eval.draw_seed=777", f"eval.long_range.workers={sys.argv[3]}"]
    ctrl, _ = load_run(run_dir, overrides=ov)
    t = time.time()
    res = lr.run_long_range(ctrl, ctrl.cfg)
    json.dump({"workers": int(sys.argv[3]), "seconds": time.time() - t, "rows": res["rows"]}, open(sys.argv[4], "w"))
    print(sys.argv[3], "workers", round(time.time() - t, 1), "s,", len(res["rows"]), "documents")
