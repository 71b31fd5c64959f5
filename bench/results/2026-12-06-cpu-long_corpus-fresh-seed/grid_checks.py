"""Two reads of sweeps' eval/eval.json that bars.py (../2026-11-29-cpu-long_corpus-seeds/) does not make.
Usage (from the repository root): python grid_checks.py GRID_EVAL_JSON [REREAD_EVAL_JSON ...]
- the honest grid: `focused` accuracy at each in-between length (12x, 24x, 48x) against its two neighbours and at
  each end depth (0.02, 0.98) against the nearest sweep depth (0.1, 0.9), pooled over the rest; and the depth-0.98
  cells per length (focused / recency / compressed / oracle);
- each re-read: passkey documents read by focused and the oracle (all depths, depth 0.1), and in how many of
  focused's misses the layout held the needle at LOD0 (the base's copy failed, not the locator)."""
import json
import sys


def acc(rows, task, n=None, d=None, v="focused"):
    c = [r for r in rows if r["task"] == task and (n is None or r["length"] == n) and (d is None or r["depth"] == d)]
    return sum(r["exact"][v] for r in c) / len(c)


lr = json.load(open(sys.argv[1]))["long_range"]
w, rows = lr["base_window"], lr["rows"]
print(f"grid, draw {lr['draw_seed']}: focused accuracy, in-between lengths against their neighbours, end depths against theirs")
worst = (0.0, "", "")
for t in lr["tasks"]:
    for m, (a, b) in {12: (4, 16), 24: (16, 32), 48: (32, 64)}.items():
        x, ya, yb = acc(rows, t, m * w), acc(rows, t, a * w), acc(rows, t, b * w)
        gap = max(min(ya, yb) - x, x - max(ya, yb), 0.0)
        worst = max(worst, (gap, t, f"{m}x"))
        print(f"{t:24s} {m}x {x:.2f}  neighbours {a}x {ya:.2f} {b}x {yb:.2f}  outside by {gap:.2f}")
    for d, e in ((0.02, 0.1), (0.98, 0.9)):
        x, y = acc(rows, t, d=d), acc(rows, t, d=e)
        worst = max(worst, (abs(x - y), t, f"depth {d}"))
        print(f"{t:24s} depth {d} {x:.2f}  depth {e} {y:.2f}  apart by {abs(x - y):.2f}")
print(f"largest: {worst[0]:.2f} {worst[1]} {worst[2]}")
print("\ndepth 0.98 by length: focused / recency / compressed / oracle (documents read, of 8)")
for t in lr["tasks"]:
    cells = []
    for n in lr["lengths"]:
        c = [r for r in rows if r["task"] == t and r["length"] == n and r["depth"] == 0.98]
        cells.append(f"{n // w}x " + "/".join(str(sum(r["exact"][v] for r in c)) for v in ("focused", "recency", "compressed", "oracle")))
    print(f"{t:24s}", "  ".join(cells))
for path in sys.argv[2:]:
    lr = json.load(open(path))["long_range"]
    for t in ("passkey", "passkey@held_out"):
        c = [r for r in lr["rows"] if r["task"] == t]
        f, o = sum(r["exact"]["focused"] for r in c), sum(r["exact"]["oracle"] for r in c)
        c1 = [r for r in c if r["depth"] == 0.1]
        miss = [r for r in c if not r["exact"]["focused"]]
        print(f"\nre-read, draw {lr['draw_seed']}, {t} at {lr['lengths']}: focused {f}, oracle {o} of {len(c)} "
              f"(depth 0.1: {sum(r['exact']['focused'] for r in c1)} / {sum(r['exact']['oracle'] for r in c1)} of {len(c1)}); "
              f"focused's misses with the needle at LOD0: {sum(r['needle_lod']['focused'] == 0 for r in miss)} of {len(miss)}")
