"""Pair two honest-grid reads of the same documents (A: the preset, B: with allocator.inference.suffix_guard_skip)
document by document: focused's and salience's documents gained and lost, by (length multiple, depth), and the
refocuses the skip left without an edit where A's made edits. Cells below compressed / recency: bars.py.
Usage: python pair.py A_EVAL_JSON B_EVAL_JSON"""
import json, sys
from collections import Counter

def load(p):
    lr = json.load(open(p))["long_range"]
    return lr, {(r["task"], r["length"], r["depth"], r["doc"]): r for r in lr["rows"]}

la, a = load(sys.argv[1]); lb, b = load(sys.argv[2])
assert a.keys() == b.keys() and la["draw_seed"] == lb["draw_seed"]
w = la["base_window"]
print(f"draw {la['draw_seed']}, {len(a)} documents; seconds {la['seconds']:.0f} -> {lb['seconds']:.0f}")
for v in ("focused", "salience"):
    gain = [k for k in a if b[k]["exact"][v] and not a[k]["exact"][v]]
    lost = [k for k in a if a[k]["exact"][v] and not b[k]["exact"][v]]
    n = len(a)
    print(f"{v:9s} {sum(r['exact'][v] for r in a.values())} -> {sum(r['exact'][v] for r in b.values())} of {n}: "
          f"gained {len(gain)}, lost {len(lost)}")
    print("   gained at", dict(Counter((k[1] // w, k[2]) for k in gain)), " lost at", dict(Counter((k[1] // w, k[2]) for k in lost)))
skipped = [k for k in b if b[k]["edits"]["focused"] == 0 and a[k]["edits"]["focused"] > 0]
print("focused refocuses with no edit under the skip, where off made edits:", len(skipped), dict(Counter((k[1] // w, k[2]) for k in skipped)))
