"""Documents read per variant of one or more grid reads, and `focused` per (multiple, depth).
Usage: python counts.py RUN_COPY_DIR [...] (each holds eval/eval.json; the label is the folder's name)."""
import json
import sys
from collections import defaultdict
from pathlib import Path

for run in sys.argv[1:]:
    lr = json.load(open(Path(run) / "eval" / "eval.json"))["long_range"]
    total, cell = defaultdict(lambda: [0, 0]), defaultdict(lambda: [0, 0])
    for r in lr["rows"]:
        for v, ok in r["exact"].items():
            total[v][0] += ok
            total[v][1] += 1
        c = cell[(r["length"] // lr["base_window"], r["depth"])]
        c[0] += r["exact"]["focused"]
        c[1] += 1
    print(Path(run).name, " ".join(f"{v}:{a}/{n}" for v, (a, n) in total.items()))
    print("   focused by (mult,depth):", " ".join(f"{m}x{d}:{a}/{n}" for (m, d), (a, n) in sorted(cell.items())))
