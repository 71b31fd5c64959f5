"""Two task-suite reads of the same draw by two sets of nets, paired per document: each variant's count per
(multiple, depth) bucket side by side, and score(B) - score(A) over all documents with a normal 95% interval.

    PYTHONPATH=<repo> python pair_runs.py A.json B.json   # e.g. bounded-trained A, slot-trained B
"""
import json
import sys
from collections import defaultdict

from mc.eval.stats import paired_diff_ci

VARIANTS = ["full", "oracle", "focused", "salience", "recency", "compressed", "random"]
a_path, b_path = sys.argv[1:3]
a, b = (json.load(open(p)) for p in (a_path, b_path))
if a["draw_seed"] != b["draw_seed"]:
    raise SystemExit(f"different draws: {a['draw_seed']} and {b['draw_seed']}")


def key(r):
    return (r["task"], r["multiple"], r["depth"], r["doc"])


rows_a, rows_b = ({key(r): r for r in d["rows"]} for d in (a, b))
if rows_a.keys() != rows_b.keys():
    raise SystemExit("the two reads hold different documents")
for k in rows_a:  # the same document: the same answer on both sides
    assert rows_a[k]["answers"] == rows_b[k]["answers"], k
variants = [v for v in VARIANTS if v in a["variants"] and v in b["variants"]]
print(f"A = {a_path} ({a['positions']} positions)\nB = {b_path} ({b['positions']} positions), draw {a['draw_seed']}\n")
print("| task | multiple | depth | n | " + " | ".join(f"{v} A / B" for v in variants) + " |")
print("|---" * (4 + len(variants)) + "|")
buckets = defaultdict(list)
for k in sorted(rows_a):
    buckets[k[:3]].append(k)
for bk, ks in buckets.items():
    cells = [f"{sum(rows_a[k]['score'][v] for k in ks):g} / {sum(rows_b[k]['score'][v] for k in ks):g}" for v in variants]
    print(f"| {bk[0]} | {bk[1]}x | {bk[2]} | {len(ks)} | " + " | ".join(cells) + " |")
print()
for task in sorted({k[0] for k in rows_a}):
    ks = [k for k in sorted(rows_a) if k[0] == task]
    for v in variants:
        ci = paired_diff_ci([rows_b[k]["score"][v] for k in ks], [rows_a[k]["score"][v] for k in ks])
        print(f"{task} {v}: B - A = {ci['mean']:+.3f} [{ci['lo']:+.3f}, {ci['hi']:+.3f}] over {len(ks)} documents")
