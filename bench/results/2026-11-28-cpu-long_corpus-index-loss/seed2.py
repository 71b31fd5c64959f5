"""A record of how the seed-2 numbers were made (not a tool): python seed2.py [sweeps.json] [NAME]
For one whole-run sweep (default n_tc2): correct of n per task and length for every variant, focused / oracle, and
focused - salience with 95% percentile-bootstrap intervals over documents (4000 resamples), per task family
(held-out template pooled in), per length and at 16x and 32x together."""
import json, random, sys
from collections import Counter, defaultdict

def boot(d, n=4000):
    rng, m = random.Random(0), len(d)
    xs = sorted(sum(rng.choice(d) for _ in range(m)) / m for _ in range(n))
    return f"{sum(d) / m:+.3f} [{xs[int(0.025 * n)]:+.3f}, {xs[int(0.975 * n)]:+.3f}]"

sw = json.load(open(sys.argv[1] if len(sys.argv) > 1 else "sweeps.json"))
s = sw[sys.argv[2] if len(sys.argv) > 2 else "n_tc2"]
vs, w = s["variants"], 128  # the long_corpus base window: lengths are multiples of it
f, sal, o = vs.index("focused"), vs.index("salience"), vs.index("oracle")
c, cf, n, gap = Counter(), Counter(), Counter(), defaultdict(list)  # c per task, cf per family
for task, length, depth, doc, exact, lods, decoys in s["rows"]:
    fam, L = task.split("@")[0], length // w
    n[(task, L)] += 1
    for i, v in enumerate(vs):
        c[(task, L, v)] += int(exact[i]); cf[(fam, L, v)] += int(exact[i])
    d = int(exact[f]) - int(exact[sal])
    for key in ((fam, "all"), (fam, f"{L}x")) + (((fam, "16x and 32x"),) if L in (16, 32) else ()):
        gap[key].append(d)
print(f"draw {s['draw_seed']}, variants {vs}")
for (task, L) in sorted(n):
    print(f"{task} {L}x of {n[(task, L)]}: " + " ".join(f"{v} {c[(task, L, v)]}" for v in vs))
for fam in sorted({k[0] for k in gap}):
    print(fam, "focused / oracle:", " ".join(f"{L}x {cf[(fam, L, 'focused')] / max(1, cf[(fam, L, 'oracle')]):.2f}"
                                          for L in sorted({k[1] for k in n})))
    for key in sorted(k for k in gap if k[0] == fam):
        print(f"{fam} {key[1]} focused - salience ({len(gap[key])} documents): {boot(gap[key])}")
