"""Issue #39's bars, one line per run, from sweeps' eval/eval.json (a record of how bars.md was made, not a tool).
Usage (from a copy of the repository): python bars.py NAME=EVAL_JSON ... > bars.md
Per sweep: focused / oracle per task at 16x-128x (the lowest over those lengths, and where), the oracle's lowest
passkey accuracy there, LensNet - salience on multi-needle at 16x and 32x (paired, 95% interval), and the cells
(task x length x depth) where focused is below recency or compressed with the paired interval below zero."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))
from mc.eval.stats import paired_diff_ci  # noqa: E402

print("| run | draw | focused / oracle, lowest at 16x-128x: passkey, multi-needle, held-out passkey, held-out multi-needle "
      "| oracle passkey, lowest | LensNet - salience, multi-needle 16x / 32x | cells below recency or compressed |")
print("|---|---|---|---|---|---|")
for arg in sys.argv[1:]:
    name, path = arg.split("=", 1)
    lr = json.load(open(path))["long_range"]
    rows, w = lr["rows"], lr["base_window"]
    bar_lengths = [n for n in lr["lengths"] if 16 <= n // w <= 128]
    ratios, oracle_pk = [], []
    for task in ("passkey", "multi_needle", "passkey@held_out", "multi_needle@held_out"):
        worst = None
        for n in bar_lengths:
            c = [r for r in rows if r["task"] == task and r["length"] == n]
            o = sum(r["exact"]["oracle"] for r in c)
            v = sum(r["exact"]["focused"] for r in c) / o if o else float("nan")
            if worst is None or v < worst[0]:
                worst = (v, n // w)
            if task.startswith("passkey"):
                oracle_pk.append((o / len(c), n // w, task))
        ratios.append(f"{worst[0]:.2f} ({worst[1]}x)")
    leads = []
    for m in (16, 32):
        c = [r for r in rows if r["task"] == "multi_needle" and r["length"] == m * w]
        if not c:
            leads.append("-")
            continue
        ci = paired_diff_ci([float(r["exact"]["focused"]) for r in c], [float(r["exact"]["salience"]) for r in c])
        leads.append(f"{ci['mean']:+.2f} [{ci['lo']:+.2f}, {ci['hi']:+.2f}]")
    harm, n_cells = [], 0
    for task in lr["tasks"]:
        for n in lr["lengths"]:
            for d in lr["depths"]:
                c = [r for r in rows if r["task"] == task and r["length"] == n and r["depth"] == d]
                if not c:
                    continue
                n_cells += 1
                f = [float(r["exact"]["focused"]) for r in c]
                below = [v[0] for v in ("recency", "compressed")
                         if paired_diff_ci(f, [float(r["exact"][v]) for r in c])["hi"] < 0]
                if below:
                    harm.append(f"{task} {n // w}x d{d} (<{''.join(below)})")
    o = min(oracle_pk)
    print(f"| {name} | {lr['draw_seed']} | {', '.join(ratios)} | {o[0]:.2f} ({o[2]} {o[1]}x) | {' / '.join(leads)} | "
          f"{len(harm)} of {n_cells}{': ' + '; '.join(harm) if harm else ''} |")
