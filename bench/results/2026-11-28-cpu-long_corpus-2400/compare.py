"""A record of how the 2400-step tables were made (not a tool): python compare.py sweeps.json
sweeps.json holds compact sweep rows (see ../2026-11-28-cpu-long_corpus-locator/compact.py). Per sweep: correct of 48
per task family and length (held-out template pooled in) for every variant, and focused / oracle; the held-out
template alone, pooled over lengths. For each seed swept
at both step counts on one draw (n24_sS and n36_sS: the same documents), focused at 2400 minus focused at 3600,
paired per document, with a 95% percentile bootstrap interval (4000 resamples)."""
import json, random, sys
from collections import Counter


def boot(d, n=4000):
    rng, m = random.Random(0), len(d)
    xs = sorted(sum(rng.choice(d) for _ in range(m)) / m for _ in range(n))
    return f"{sum(d) / m:+.3f} [{xs[int(0.025 * n)]:+.3f}, {xs[int(0.975 * n)]:+.3f}]"


def table(name, s):
    vs, c, n = s["variants"], Counter(), Counter()
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
    held = Counter()
    for task, length, depth, doc, exact, lods, decoys in s["rows"]:
        if task.endswith("@held_out"):
            for v in ("focused", "oracle"):
                held[(task, v)] += int(exact[vs.index(v)])
    print("held-out template, 16x-128x pooled (96 documents each): " + ", ".join(
        f"{t.split('@')[0]} focused {held[(t, 'focused')]} / oracle {held[(t, 'oracle')]}"
        for t in sorted({t for t, _ in held})))
    gap = []
    for task, length, depth, doc, exact, lods, decoys in s["rows"]:
        if task.startswith("multi_needle") and length // 128 in (16, 32):
            gap.append(int(exact[vs.index("focused")]) - int(exact[vs.index("salience")]))
    print(f"multi-needle 16x + 32x, focused - salience ({len(gap)} documents): {boot(gap)}\n")


def focused(s):
    i = s["variants"].index("focused")
    return {tuple(r[:4]): int(r[4][i]) for r in s["rows"]}


sw = json.load(open(sys.argv[1]))
for name, s in sw.items():
    if isinstance(s, dict):
        table(name, s)
for name in sorted(sw):
    if name.startswith("n24_") and "n36_" + name[4:] in sw:
        a, b = focused(sw[name]), focused(sw["n36_" + name[4:]])
        assert a.keys() == b.keys(), "the two sweeps must read the same documents"
        for fam in ("passkey", "multi_needle"):
            d = [a[k] - b[k] for k in a if k[0].split("@")[0] == fam]
            print(f"{name[4:]} {fam}: focused 2400 - 3600 steps ({len(d)} documents): {boot(d)}")
