"""Two sweeps of the same documents (same draw): per task, focused / salience correct per length for A and B, the
paired difference B - A in focused (all depths, end depths 0.02 and 0.98, the middle ones), the harmful cells of each
(focused below recency or compressed beyond the paired interval, per length x depth), and LensNet - salience on
multi-needle at 16x and 32x. Usage: python compare.py A_EVAL_JSON B_EVAL_JSON NAME_A NAME_B"""
import json, sys
from pathlib import Path
sys.path.insert(0, str(Path.cwd()))
from mc.eval.stats import mean_ci  # noqa: E402

a, b = (json.load(open(p))["long_range"] for p in sys.argv[1:3])
na, nb = sys.argv[3:5]
assert a["draw_seed"] == b["draw_seed"]
key = lambda r: (r["task"], r["length"], r["depth"], r["doc"])
ra, rb = {key(r): r for r in a["rows"]}, {key(r): r for r in b["rows"]}
assert ra.keys() == rb.keys()
w = a["base_window"]
print(f"Draw {a['draw_seed']}, {len(ra)} documents; {na} {a['seconds']} s, {nb} {b['seconds']} s.\n")


def ci(d):
    if not d:
        return "-"
    c = mean_ci([float(x) for x in d])
    return f"{c['mean']:+.3f} [{c['lo']:+.3f}, {c['hi']:+.3f}]"


def harm(rows):
    out = []
    for cell in sorted({(k[0], k[1], k[2]) for k in rows}):
        sel = [r for k, r in rows.items() if (k[0], k[1], k[2]) == cell]
        for base in ("recency", "compressed"):
            c = mean_ci([float(r["exact"]["focused"]) - float(r["exact"][base]) for r in sel])
            if c["hi"] < 0:
                out.append(f"{cell[0]} {cell[1] // w}x depth {cell[2]} (< {base})")
                break
    return out


print(f"| task | focused {na} -> {nb} per length | {nb} - {na}, all | end depths | middle depths |")
print("|---|---|---|---|---|")
for task in a["tasks"]:
    ks = [k for k in ra if k[0] == task]
    per = " ".join(f"{L // w}x {sum(ra[k]['exact']['focused'] for k in ks if k[1] == L)}->"
                   f"{sum(rb[k]['exact']['focused'] for k in ks if k[1] == L)}" for L in a["lengths"])
    d = lambda sel: [int(rb[k]["exact"]["focused"]) - int(ra[k]["exact"]["focused"]) for k in sel]
    print(f"| {task} | {per} | {ci(d(ks))} | {ci(d([k for k in ks if k[2] in (0.02, 0.98)]))} | "
          f"{ci(d([k for k in ks if k[2] not in (0.02, 0.98)]))} |")
print()
for name, rows in ((na, ra), (nb, rb)):
    h = harm(rows)
    print(f"- harmful cells, {name}: {len(h)}: {', '.join(h) or 'none'}")
for name, rows in ((na, ra), (nb, rb)):
    for L in (16, 32):
        sel = [r for k, r in rows.items() if k[0].startswith("multi_needle") and k[1] // w == L]
        print(f"- {name}, multi-needle {L}x ({len(sel)}): focused - salience "
              f"{ci([int(r['exact']['focused']) - int(r['exact']['salience']) for r in sel])}")
