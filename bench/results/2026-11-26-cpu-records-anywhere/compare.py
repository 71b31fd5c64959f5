"""A record of the comparison (not a tool): a long-range sweep (mc_eval's eval.json, argument 2) against one run's rows
in a compact sweep file (argument 1, key argument 4), the same documents paired; JSON summary to argument 3.
Usage: python cmp_lcr.py ../2026-11-26-cpu-lookahead-fit/fresh-draw.json eval.json out.json lc_s0/look"""
import json, sys, math, random
KEY = sys.argv[4] if len(sys.argv) > 4 else "lc_s0/look"
fresh = json.load(open(sys.argv[1]))[KEY]
ev = json.load(open(sys.argv[2]))
lr = ev.get("long_range", ev)
variants = fresh["variants"]
A = {(r[0], r[1], r[2], r[3]): dict(zip(variants, (c == "1" for c in r[4]))) for r in fresh["rows"]}
B = {(r["task"], r["length"], r["depth"], r["doc"]): r["exact"] for r in lr["rows"]}
assert lr["draw_seed"] == fresh["draw_seed"], (lr["draw_seed"], fresh["draw_seed"])
keys = sorted(set(A) & set(B))
print(f"paired docs: {len(keys)} (A {len(A)}, B {len(B)}); B seconds {lr['seconds']}")
def boot(diffs, n=4000):
    rng = random.Random(0); m = len(diffs)  # percentile bootstrap over documents, 4000 resamples
    xs = sorted(sum(rng.choice(diffs) for _ in range(m)) / m for _ in range(n))
    return sum(diffs) / m, xs[int(0.025 * n)], xs[int(0.975 * n)]
out = {}
for task in ("passkey", "multi_needle"):
    print(f"\n## {task}: {KEY} -> {sys.argv[2]}, focused / salience / compressed / recency / oracle (of 16)")
    lengths = sorted({k[1] for k in keys if k[0] == task}); depths = sorted({k[2] for k in keys if k[0] == task})
    print("| length | " + " | ".join(f"depth {d}" for d in depths) + " |")
    print("|---|" + "---|" * len(depths))
    for L in lengths:
        cells = []
        for d in depths:
            ks = [k for k in keys if k[:3] == (task, L, d)]
            s = lambda M, v: sum(M[k][v] for k in ks)
            cells.append(" / ".join(f"{s(A, v)}->{s(B, v)}" for v in ("focused", "salience", "compressed", "recency", "oracle")))
        print(f"| {L // 128}x | " + " | ".join(cells) + " |")
    for label, sel in [("all", lambda k: True)] + [(f"{L // 128}x", (lambda L: lambda k: k[1] == L)(L)) for L in lengths] + \
            [(f"depth {d}", (lambda d: lambda k: k[2] == d)(d)) for d in depths]:
        ks = [k for k in keys if k[0] == task and sel(k)]
        f = boot([B[k]["focused"] - A[k]["focused"] for k in ks])
        gA = boot([A[k]["focused"] - A[k]["salience"] for k in ks]); gB = boot([B[k]["focused"] - B[k]["salience"] for k in ks])
        print(f"- {label}: focused lcr-lc {f[0]:+.3f} [{f[1]:+.3f}, {f[2]:+.3f}] ({sum(A[k]['focused'] for k in ks)} -> "
              f"{sum(B[k]['focused'] for k in ks)} of {len(ks)}); focused-salience lc {gA[0]:+.3f} [{gA[1]:+.3f}, {gA[2]:+.3f}], "
              f"lcr {gB[0]:+.3f} [{gB[1]:+.3f}, {gB[2]:+.3f}]")
        out[f"{task}/{label}"] = {"n": len(ks), "focused_lc": sum(A[k]['focused'] for k in ks),
                                  "focused_lcr": sum(B[k]['focused'] for k in ks),
                                  "salience_lc": sum(A[k]['salience'] for k in ks), "salience_lcr": sum(B[k]['salience'] for k in ks),
                                  "focused_diff_ci": f, "gap_lc_ci": gA, "gap_lcr_ci": gB}
if len(sys.argv) > 3:
    json.dump(out, open(sys.argv[3], "w"), indent=1)
