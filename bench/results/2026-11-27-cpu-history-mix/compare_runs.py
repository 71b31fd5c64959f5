"""A record of the comparison (not a tool): two long-range sweeps (mc_eval's eval.json) of the same draw, A and B,
the same documents paired. Usage: python compare_runs.py A/eval.json B/eval.json out.json [label]
Prints per cell focused / salience / compressed / recency / oracle A->B (of n) and paired focused differences
with 95% percentile-bootstrap intervals over documents (4000 resamples); writes the summary to out.json."""
import json, random, sys

def rows(path):
    ev = json.load(open(path))
    lr = ev.get("long_range", ev)
    return lr["draw_seed"], lr["base_window"], {(r["task"], r["length"], r["depth"], r["doc"]): r["exact"] for r in lr["rows"]}

def boot(diffs, n=4000):
    rng, m = random.Random(0), len(diffs)
    xs = sorted(sum(rng.choice(diffs) for _ in range(m)) / m for _ in range(n))
    return sum(diffs) / m, xs[int(0.025 * n)], xs[int(0.975 * n)]

da, w, A = rows(sys.argv[1])
db, _, B = rows(sys.argv[2])
assert da == db, f"different draws: {da} vs {db}"
keys = sorted(set(A) & set(B))
label = sys.argv[4] if len(sys.argv) > 4 else "A->B"
print(f"draw {da}, paired documents {len(keys)} ({label})")
out = {"draw_seed": da, "a": sys.argv[1], "b": sys.argv[2], "n": len(keys), "cells": {}, "summary": {}}
VS = ("focused", "salience", "compressed", "recency", "oracle")
for task in sorted({k[0] for k in keys}):
    lengths = sorted({k[1] for k in keys if k[0] == task}); depths = sorted({k[2] for k in keys if k[0] == task})
    print(f"\n## {task}: " + " / ".join(VS) + " (A->B)")
    print("| length | " + " | ".join(f"depth {d}" for d in depths) + " |\n|---|" + "---|" * len(depths))
    for L in lengths:
        cells = []
        for d in depths:
            ks = [k for k in keys if k[:3] == (task, L, d)]
            c = {v: [sum(M[k][v] for k in ks) for M in (A, B)] for v in VS}
            out["cells"][f"{task}/{L // w}x/{d}"] = dict(c, n=len(ks))
            cells.append(" / ".join(f"{a}->{b}" for a, b in c.values()))
        print(f"| {L // w}x | " + " | ".join(cells) + " |")
    sels = [("all", lambda k: True)] + [(f"{L // w}x", (lambda L: lambda k: k[1] == L)(L)) for L in lengths] + \
           [(f"depth {d}", (lambda d: lambda k: k[2] == d)(d)) for d in depths]
    for name, sel in sels:
        ks = [k for k in keys if k[0] == task and sel(k)]
        f = boot([B[k]["focused"] - A[k]["focused"] for k in ks])
        ga = boot([A[k]["focused"] - A[k]["salience"] for k in ks]); gb = boot([B[k]["focused"] - B[k]["salience"] for k in ks])
        fa, fb = sum(A[k]["focused"] for k in ks), sum(B[k]["focused"] for k in ks)
        print(f"- {name}: focused {fa} -> {fb} of {len(ks)}, paired {f[0]:+.3f} [{f[1]:+.3f}, {f[2]:+.3f}]; "
              f"focused - salience {ga[0]:+.3f} [{ga[1]:+.3f}, {ga[2]:+.3f}] -> {gb[0]:+.3f} [{gb[1]:+.3f}, {gb[2]:+.3f}]")
        out["summary"][f"{task}/{name}"] = {"n": len(ks), "focused": [fa, fb], "paired": [round(x, 4) for x in f],
                                            "minus_salience": [[round(x, 4) for x in ga], [round(x, 4) for x in gb]]}
json.dump(out, open(sys.argv[3], "w"), indent=1)
