"""Two task-suite reads of the same draw by two sets of nets, paired per document: score(B) - score(A) per variant
over all documents, with a normal 95% interval (the counts per bucket: ../2026-11-29-cpu-smollm2_cpu-fresh-draw/buckets.py).

    PYTHONPATH=<repo> python pair_runs.py A.json B.json   # e.g. bounded-trained A, slot-trained B
"""
import json
import sys

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
for task in sorted({k[0] for k in rows_a}):
    ks = [k for k in sorted(rows_a) if k[0] == task]
    for v in variants:
        ci = paired_diff_ci([rows_b[k]["score"][v] for k in ks], [rows_a[k]["score"][v] for k in ks])
        print(f"{task} {v}: B - A = {ci['mean']:+.3f} [{ci['lo']:+.3f}, {ci['hi']:+.3f}] over {len(ks)} documents")
