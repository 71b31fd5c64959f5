"""A record of how the two-seed numbers were made (not a tool): python pooled_seeds.py [sweeps.json]
Pairs each seed's sweep without the index loss (n_ti0, n_ti1) with the one with it (n_tc0, n_tc1), the same draw's
documents, and prints per task family (held-out template pooled in) the paired focused change and focused - salience,
with 95% percentile-bootstrap intervals over documents (4000 resamples), and focused / oracle per length."""
import json, random, sys
from collections import Counter

def boot(d, n=4000):
    rng, m = random.Random(0), len(d)
    xs = sorted(sum(rng.choice(d) for _ in range(m)) / m for _ in range(n))
    return f"{sum(d) / m:+.3f} [{xs[int(0.025 * n)]:+.3f}, {xs[int(0.975 * n)]:+.3f}]"

sw = json.load(open(sys.argv[1] if len(sys.argv) > 1 else "sweeps.json"))
def rows(name):
    s = sw[name]
    return s["variants"], {tuple(r[:4]): r[4] for r in s["rows"]}
pairs = [("n_ti0", "n_tc0"), ("n_ti1", "n_tc1")]
w = 128  # the long_corpus base window: lengths are multiples of it
for fam in ("multi_needle", "passkey"):
    for label, sel in (("all lengths", lambda k: True), ("16x and 32x", lambda k: k[1] // w in (16, 32))):
        ch, fs_a, fs_b = [], [], []
        for a, b in pairs:
            (va, A), (vb, B) = rows(a), rows(b)
            fa, sa, fb, sb = va.index("focused"), va.index("salience"), vb.index("focused"), vb.index("salience")
            for k in sorted(set(A) & set(B)):
                if k[0].split("@")[0] == fam and sel(k):
                    ch.append(int(B[k][fb]) - int(A[k][fa]))
                    fs_a.append(int(A[k][fa]) - int(A[k][sa])); fs_b.append(int(B[k][fb]) - int(B[k][sb]))
        print(f"{fam}, {label}, {len(ch)} documents: paired focused change {boot(ch)}; "
              f"focused - salience {boot(fs_a)} -> {boot(fs_b)}")
for name in ("n_ti0", "n_tc0", "n_ti1", "n_tc1"):
    vs, R = rows(name)
    f, o, c = vs.index("focused"), vs.index("oracle"), Counter()
    for k, e in R.items():
        c[(k[0].split("@")[0], k[1] // w, "f")] += int(e[f]); c[(k[0].split("@")[0], k[1] // w, "o")] += int(e[o])
    for fam in ("passkey", "multi_needle"):
        print(name, fam, " ".join(f"{L}x {c[(fam, L, 'f')] / max(1, c[(fam, L, 'o')]):.2f}" for L in (4, 16, 32, 64, 128, 256)))
