"""Tables of an honest-grid sweep (in-between lengths, end depths) from a run's eval/eval.json.
Usage (from a copy of the repository): python tables.py EVAL_JSON > tables.md
Per task: correct documents per variant and length (pooled over depths); per depth and length focused / recency /
compressed / oracle, with **<r** / **<c** where focused is below recency / compressed with the paired 95% interval of
the difference entirely below zero; focused / oracle per length next to the mean of its neighbouring lengths; and
focused minus salience per length (paired per document)."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))
from mc.eval.stats import paired_diff_ci  # noqa: E402

lr = json.load(open(sys.argv[1]))["long_range"]
rows, w = lr["rows"], lr["base_window"]
lengths, depths, variants = lr["lengths"], lr["depths"], lr["variants"]
print(f"Draw {lr['draw_seed']}, {len(rows)} documents, {lr['seconds']} s; lengths "
      f"{', '.join(f'{n // w}x' for n in lengths)}; depths {', '.join(map(str, depths))} (jitter {lr['depth_jitter']}).\n")
for task in lr["tasks"]:
    sel = [r for r in rows if r["task"] == task]
    n_len = len([r for r in sel if r["length"] == lengths[0]])
    print(f"**{task}, by length** (pooled over depths; correct / {n_len})\n")
    print("| variant | " + " | ".join(f"{n // w}x" for n in lengths) + " |")
    print("|---" * (len(lengths) + 1) + "|")
    for v in variants:
        print(f"| {v} | " + " | ".join(str(sum(r["exact"][v] for r in sel if r["length"] == n)) for n in lengths) + " |")
    n_cell = len([r for r in sel if r["length"] == lengths[0] and r["depth"] == depths[0]])
    print(f"\n**{task}, by depth and length**: focused / recency / compressed / oracle (correct / {n_cell})\n")
    print("| length | " + " | ".join(f"depth {d}" for d in depths) + " |")
    print("|---" * (len(depths) + 1) + "|")
    for n in lengths:
        cells = []
        for d in depths:
            c = [r for r in sel if r["length"] == n and r["depth"] == d]
            f = [float(r["exact"]["focused"]) for r in c]
            marks = "".join(k for k, v in (("r", "recency"), ("c", "compressed"))
                            if v in variants and paired_diff_ci(f, [float(r["exact"][v]) for r in c])["hi"] < 0)
            cells.append(" / ".join(str(sum(r["exact"][v] for r in c)) for v in ("focused", "recency", "compressed", "oracle"))
                         + (f" **<{marks}**" if marks else ""))
        print(f"| {n // w}x | " + " | ".join(cells) + " |")
    ratio = {}
    for n in lengths:
        c = [r for r in sel if r["length"] == n]
        o = sum(r["exact"]["oracle"] for r in c)
        ratio[n] = sum(r["exact"]["focused"] for r in c) / o if o else float("nan")
    print(f"\n**{task}, focused / oracle by length** (next to the mean of the neighbouring lengths)\n")
    print("| length | focused / oracle | neighbours' mean | difference |\n|---|---|---|---|")
    for i, n in enumerate(lengths):
        nb = [ratio[lengths[j]] for j in (i - 1, i + 1) if 0 <= j < len(lengths)]
        m = sum(nb) / len(nb)
        print(f"| {n // w}x | {ratio[n]:.2f} | {m:.2f} | {ratio[n] - m:+.2f} |")
    if "salience" in variants:
        print(f"\n**{task}, focused minus salience** (paired per document, pooled over depths, 95% interval)\n")
        print("| length | focused - salience |\n|---|---|")
        for n in lengths:
            c = [r for r in sel if r["length"] == n]
            ci = paired_diff_ci([float(r["exact"]["focused"]) for r in c], [float(r["exact"]["salience"]) for r in c])
            print(f"| {n // w}x | {ci['mean']:+.3f} [{ci['lo']:+.3f}, {ci['hi']:+.3f}] |")
    print()
