"""Summarise long-range rows of one or more eval.json files: correct/total per (task, length) per variant,
and per depth for focused/oracle."""
import json, sys
from collections import defaultdict
for path in sys.argv[1:]:
    lr = json.load(open(path))["long_range"]
    vs = lr["variants"]
    cell = defaultdict(lambda: defaultdict(int)); tot = defaultdict(int)
    dep = defaultdict(lambda: defaultdict(int)); dtot = defaultdict(int)
    lods = defaultdict(list)
    for r in lr["rows"]:
        k = (r["task"], r["length"]); tot[k] += 1
        dk = (r["task"], r["length"], r["depth"]); dtot[dk] += 1
        for v in vs:
            cell[k][v] += bool(r["exact"][v]); dep[dk][v] += bool(r["exact"][v])
        for v in ("focused", "oracle"):
            if v in r.get("needle_lod", {}):
                lods[(k, v)].append(r["needle_lod"][v])
    print(f"== {path} draw {lr['draw_seed']} {lr['seconds']:.0f}s")
    for k in sorted(tot):
        lod = {v: round(sum(lods[(k, v)]) / max(1, len(lods[(k, v)])), 2) for v in ("focused", "oracle") if lods[(k, v)]}
        print(k, tot[k], {v: cell[k][v] for v in vs}, "mean needle lod", lod)
    for dk in sorted(dtot):
        print("   ", dk, dtot[dk], {v: dep[dk][v] for v in vs if v in ("focused", "oracle", "salience")})
