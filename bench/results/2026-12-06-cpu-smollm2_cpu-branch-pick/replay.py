"""Replay pick rules over pick_probe.py's records: documents read per locator under each rule.

    python replay.py A.json [B.json ...]
"""
import json
import sys


def pick(paths, branch_unchanged, w_tf=1.0, margin=0.0, tail=8):
    """Index of the kept path: zoom 0 unless another beats its fit + margin (strictly); the unchanged layout last.
    ``tail``: the teacher-forced part over that many newest tokens (8 as run; 16 / 24 / 31 from ``tf_n``)."""
    def f(p):
        tf = p["tf"] if tail == 8 else p["tf_n"][str(tail)]
        return w_tf * tf + (p["fit"] - p["tf"])
    kept, best = 0, f(paths[0]) + margin
    for i in range(1, len(paths)):
        if f(paths[i]) > best:
            kept, best = i, f(paths[i])
    return kept


rules = [("as run (w_tf 1, margin 0)", 1.0, 0.0)] + [(f"w_tf {w}, margin {m}", w, m)
                                                    for w in (1.0, 0.5, 0.0) for m in (0.0, 1.0, 2.0, 4.0)]
for path in sys.argv[1:]:
    d = json.load(open(path))
    bu = d["refocus"]["branch_unchanged"]
    rows = d["rows"]
    print(f"== {path}: {d['task']} draw {d['draw']}, {len(rows)} documents")
    for loc in ("focused", "salience"):
        ok_replay = sum(pick(r[loc]["paths"], bu) == r[loc]["branch"] for r in rows if r[loc]["paths"])
        n_paths = sum(bool(r[loc]["paths"]) for r in rows)
        any_path = sum(max([p["score"] for p in r[loc]["paths"]] or [r[loc]["score"]]) for r in rows)
        print(f"  {loc}: as run {sum(r[loc]['score'] for r in rows):.0f}, the best path {any_path:.0f}, "
              f"replay matches the kept path in {ok_replay} of {n_paths}")
    tails = [8] + ([16, 24, 31] if "tf_n" in rows[0]["focused"]["paths"][0] else [])
    for name, w, m in rules + [(f"tail {t}, margin 0", 1.0, 0.0) for t in tails[1:]]:
        cells = []
        for loc in ("focused", "salience"):
            tot = 0.0
            for r in rows:
                x = r[loc]
                t = int(name.split()[1].rstrip(",")) if name.startswith("tail") else 8
                tot += x["paths"][pick(x["paths"], bu, w, m, t)]["score"] if x["paths"] else x["score"]
            cells.append(tot)
        print(f"  {name:28s} focused {cells[0]:4.0f}  salience {cells[1]:4.0f}")
