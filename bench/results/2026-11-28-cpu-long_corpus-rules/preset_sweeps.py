"""A record of how the three-sides sweep table was made (not a tool): python preset_sweeps.py preset_sweeps.json
Per seed (one fresh draw each, long_corpus with edge_sides 3): correct of 48 per task family and length (held-out
template pooled in), focused / oracle, and focused - salience on multi-needle at 16x + 32x with a 95% percentile
bootstrap interval over documents (4000 resamples)."""
import json, random, sys
from collections import Counter

def boot(d, n=4000):
    rng, m = random.Random(0), len(d)
    xs = sorted(sum(rng.choice(d) for _ in range(m)) / m for _ in range(n))
    return f"{sum(d) / m:+.3f} [{xs[int(0.025 * n)]:+.3f}, {xs[int(0.975 * n)]:+.3f}]"

sw = json.load(open(sys.argv[1]))
for name, s in sw.items():
    if not isinstance(s, dict):
        continue
    vs = s["variants"]
    c, n, gap = Counter(), Counter(), []
    for task, length, depth, doc, exact, lods, decoys in s["rows"]:
        fam, L = task.split("@")[0], length // 128
        n[(fam, L)] += 1
        for i, v in enumerate(vs):
            c[(fam, L, v)] += int(exact[i])
        if fam == "multi_needle" and L in (16, 32):
            gap.append(int(exact[vs.index("focused")]) - int(exact[vs.index("salience")]))
    print(f"## {name} (draw {s['draw_seed']})")
    print("| task | length | " + " | ".join(vs) + " | focused / oracle |")
    print("|---|---|" + "---|" * (len(vs) + 1))
    for fam, L in sorted(n):
        f, o = c[(fam, L, "focused")], c[(fam, L, "oracle")]
        print(f"| {fam} | {L}x | " + " | ".join(str(c[(fam, L, v)]) for v in vs) + f" | {f / max(o, 1):.2f} |")
    print(f"multi-needle 16x + 32x, focused - salience ({len(gap)} documents): {boot(gap)}\n")
