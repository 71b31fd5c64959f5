"""A record of the comparison (not a tool): in-between lengths against their neighbouring sweep cells.
Usage: python between.py GRID/eval.json BETWEEN/eval.json out.json. For each task, depth and variant, an in-between
length's accuracy (e.g. 24x) against the range of its two neighbouring lengths in the grid (16x and 32x); a cell is
'outside' when it is more than 0.1 below the lower neighbour or above the higher one."""
import json, sys
def cells(path):
    lr = json.load(open(path))["long_range"]
    w = lr["base_window"]
    out = {}
    for r in lr["rows"]:
        for v, ok in r["exact"].items():
            c = out.setdefault((r["task"], r["length"] // w, r["depth"], v), [0, 0])
            c[0] += ok; c[1] += 1
    return lr["draw_seed"], out
dg, G = cells(sys.argv[1]); db, B = cells(sys.argv[2])
grid = sorted({k[1] for k in G}); rows, outside = [], 0
print(f"grid draw {dg}, in-between draw {db}")
for (task, m, depth, v), (k, n) in sorted(B.items()):
    lo = max([g for g in grid if g < m], default=None); hi = min([g for g in grid if g > m], default=None)
    if lo is None or hi is None:
        continue
    a, b = (G[(task, x, depth, v)][0] / G[(task, x, depth, v)][1] for x in (lo, hi))
    acc = k / n
    off = acc < min(a, b) - 0.1 or acc > max(a, b) + 0.1
    outside += off and v in ("focused", "oracle")
    rows.append({"task": task, "multiple": m, "depth": depth, "variant": v, "acc": round(acc, 3), "n": n,
                 "neighbours": [lo, hi], "neighbour_acc": [round(a, 3), round(b, 3)], "outside": off})
    if v in ("focused", "oracle"):
        print(f"{task:13s} {m:3d}x d{depth:<5} {v:8s} {k:2d}/{n} = {acc:.2f}  ({lo}x {a:.2f}, {hi}x {b:.2f}){'  OUTSIDE' if off else ''}")
print(f"focused/oracle cells outside their neighbours +-0.1: {outside}")
json.dump({"grid_draw": dg, "between_draw": db, "rows": rows}, open(sys.argv[3], "w"), indent=1)
