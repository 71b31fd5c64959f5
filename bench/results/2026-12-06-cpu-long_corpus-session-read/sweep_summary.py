"""A run's long-range sweep, per task and length: focused / oracle (all depths, then per depth bucket), focused -
salience, the oracle's own accuracy, and the depth buckets where focused's interval lies wholly below compressed's or
recency's.

    python sweep_summary.py RUN_DIR/eval/eval.json
"""
import json
import sys
from collections import defaultdict

lr = json.load(open(sys.argv[1]))["long_range"]
agg = defaultdict(lambda: [0.0, 0])
for c in lr["cells"]:
    k = (c["task"], c["length"], c["variant"])
    agg[k][0] += c["accuracy"] * c["n"]
    agg[k][1] += c["n"]
cells = {(c["task"], c["length"], c["depth"], c["variant"]): c for c in lr["cells"]}
tasks, lengths = sorted({k[0] for k in agg}), sorted({k[1] for k in agg})
print(f"draw {lr['draw_seed']}, depths {lr['depths']}, base window {lr['base_window']}, budget {lr['budget']}")
for t in tasks:
    for n in lengths:
        acc = {v: agg[(t, n, v)][0] / max(1, agg[(t, n, v)][1]) for v in ("focused", "oracle", "salience")}
        per_depth = [round(cells[(t, n, d, "focused")]["accuracy"] / max(cells[(t, n, d, "oracle")]["accuracy"], 1e-9), 2)
                     for d in lr["depths"]]
        below = [d for d in lr["depths"] if cells[(t, n, d, "focused")]["hi"]
                 < max(cells[(t, n, d, "compressed")]["lo"], cells[(t, n, d, "recency")]["lo"])]
        print(f"{t:22s} {n // lr['base_window']:4d}x  focused/oracle {acc['focused'] / max(acc['oracle'], 1e-9):.2f} "
              f"{per_depth}  focused-salience {acc['focused'] - acc['salience']:+.2f}  oracle {acc['oracle']:.2f}  "
              f"documents {agg[(t, n, 'focused')][1]}  focused below compressed/recency at {below}")
