"""A record of how this folder's tables were made (not a tool): python compare.py sweeps.json
sweeps.json holds compact sweep rows (format: ../2026-11-28-cpu-long_corpus-locator/compact.py), named
n18_<seed> (1800 stage-2 steps) and n24_<seed> (2400), both nets of a seed swept on the same draw. Prints, per sweep,
correct per task family and length (held-out template pooled in, 48 documents) for every variant with focused /
oracle, and per seed the paired difference 1800 minus 2400 steps for focused, oracle and salience (95% percentile
bootstrap over documents, 4000 resamples)."""
import json, random, sys
from collections import Counter


def boot(d, n=4000):
    rng, m = random.Random(0), len(d)
    xs = sorted(sum(rng.choice(d) for _ in range(m)) / m for _ in range(n))
    return f"{sum(d) / m:+.3f} [{xs[int(0.025 * n)]:+.3f}, {xs[int(0.975 * n)]:+.3f}]"


def per_doc(s, variant):
    i = s["variants"].index(variant)
    return {tuple(r[:4]): int(r[4][i]) for r in s["rows"]}


sw = json.load(open(sys.argv[1]))
for name in sorted(k for k in sw if isinstance(sw[k], dict)):
    s, c, n = sw[name], Counter(), Counter()
    vs = s["variants"]
    for task, length, depth, doc, exact, lods, decoys in s["rows"]:
        fam, L = task.split("@")[0], length // 128
        n[(fam, L)] += 1
        for i, v in enumerate(vs):
            c[(fam, L, v)] += int(exact[i])
    print(f"## {name} (draw {s['draw_seed']}, {s['seconds']:.0f} s)")
    print("| task | length | " + " | ".join(vs) + " | focused / oracle |")
    print("|---|---|" + "---|" * (len(vs) + 1))
    for fam, L in sorted(n):
        f, o = c[(fam, L, "focused")], c[(fam, L, "oracle")]
        print(f"| {fam} | {L}x | " + " | ".join(str(c[(fam, L, v)]) for v in vs) + f" | {f / max(o, 1):.2f} |")
    gap = [per_doc(s, "focused")[k] - per_doc(s, "salience")[k] for k in per_doc(s, "focused")
           if k[0].startswith("multi_needle") and k[1] // 128 in (16, 32)]
    print(f"multi-needle 16x + 32x, focused - salience ({len(gap)} documents): {boot(gap)}\n")
for name in sorted(sw):
    if name.startswith("n18_") and "n24_" + name[4:] in sw:
        a, b = sw[name], sw["n24_" + name[4:]]
        assert a["draw_seed"] == b["draw_seed"], "the two sweeps must read the same documents"
        for v in ("focused", "oracle", "salience"):
            pa, pb = per_doc(a, v), per_doc(b, v)
            assert pa.keys() == pb.keys()
            for fam in ("passkey", "multi_needle"):
                d = [pa[k] - pb[k] for k in pa if k[0].split("@")[0] == fam]
                print(f"{name[4:]} {fam} {v}: 1800 - 2400 steps ({len(d)} documents): {boot(d)}")
