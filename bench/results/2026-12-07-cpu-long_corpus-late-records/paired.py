"""focused (and oracle, recency) documents read, new - old nets, paired per document with a 95% interval, overall and
at depths 0.02 / 0.98. Usage (from the repository root): python paired.py OLD_EVAL_JSON NEW_EVAL_JSON"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))
from mc.eval.stats import paired_diff_ci  # noqa: E402


def rows(p):
    lr = json.load(open(p))["long_range"]
    return lr["draw_seed"], {(r["task"], r["length"], r["depth"], r["doc"]): r for r in lr["rows"]}


(da, a), (db, b) = rows(sys.argv[1]), rows(sys.argv[2])
assert da == db and a.keys() == b.keys()
for v in ("focused", "oracle", "recency"):
    for label, keep in (("all", lambda k: True), ("depth 0.02", lambda k: k[2] == 0.02), ("depth 0.98", lambda k: k[2] == 0.98)):
        ks = [k for k in a if keep(k)]
        x = [float(a[k]["exact"][v]) for k in ks]
        y = [float(b[k]["exact"][v]) for k in ks]
        c = paired_diff_ci(y, x)
        d, lo, hi = c["mean"], c["lo"], c["hi"]
        print(f"draw {da} {v:8s} {label:10s} {int(sum(x))} -> {int(sum(y))} of {len(ks)}: {d:+.3f} [{lo:+.3f}, {hi:+.3f}]")
