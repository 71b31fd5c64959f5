"""Two sweeps of the same documents (eval/eval.json of the preset and of an arm), paired per document: per task,
focused (and salience) documents gained and lost, the paired mean difference with its 95% interval, and per sweep the
depth cells where focused is below recency or compressed (paired interval below zero). A record of how the tables of
this folder were made. Usage (from the repository root): python paired.py PRESET_EVAL_JSON ARM_EVAL_JSON"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))
from mc.eval.stats import paired_diff_ci  # noqa: E402


def load(path):
    lr = json.load(open(path))["long_range"]
    return lr, {(r["task"], r["length"], r["depth"], r["doc"]): r for r in lr["rows"]}


def harm(lr):
    w, out, n = lr["base_window"], [], 0
    for task in lr["tasks"]:
        for length in lr["lengths"]:
            for d in lr["depths"]:
                c = [r for r in lr["rows"] if (r["task"], r["length"], r["depth"]) == (task, length, d)]
                if not c:
                    continue
                n += 1
                f = [float(r["exact"]["focused"]) for r in c]
                below = [v[0] for v in ("recency", "compressed")
                         if paired_diff_ci(f, [float(r["exact"][v]) for r in c])["hi"] < 0]
                if below:
                    out.append(f"{task} {length // w}x d{d} ({sum(f):.0f} vs recency "
                               f"{sum(r['exact']['recency'] for r in c)} of {len(c)}; <{''.join(below)})")
    return out, n


(lra, a), (lrb, b) = load(sys.argv[1]), load(sys.argv[2])
assert a.keys() == b.keys(), "the two sweeps read different documents"
w = lra["base_window"]
print(f"draw {lra['draw_seed']}, {len(a)} documents\n")
print("| task | variant | preset | arm | gained | lost | arm - preset [95% CI] |\n|---|---|---|---|---|---|---|")
for task in lra["tasks"]:
    for v in ("focused", "salience"):
        keys = [k for k in a if k[0] == task]
        x, y = [float(b[k]["exact"][v]) for k in keys], [float(a[k]["exact"][v]) for k in keys]
        ci = paired_diff_ci(x, y)
        gained = [k for k in keys if b[k]["exact"][v] and not a[k]["exact"][v]]
        lost = [k for k in keys if a[k]["exact"][v] and not b[k]["exact"][v]]
        print(f"| {task} | {v} | {sum(y):.0f} | {sum(x):.0f} | {len(gained)} | {len(lost)} | "
              f"{ci['mean']:+.3f} [{ci['lo']:+.3f}, {ci['hi']:+.3f}] |")
        if v == "focused":
            for tag, ks in (("gained", gained), ("lost", lost)):
                for k in ks:
                    print(f"|  | {tag}: {k[1] // w}x depth {k[2]} doc {k[3]} | needle LOD {a[k]['needle_lod'].get('focused')}"
                          f" -> {b[k]['needle_lod'].get('focused')} | | | | |")
for name, lr in (("preset", lra), ("arm", lrb)):
    h, n = harm(lr)
    print(f"\n{name}: {len(h)} of {n} cells with focused below recency or compressed" + ("".join(f"\n- {x}" for x in h)))
