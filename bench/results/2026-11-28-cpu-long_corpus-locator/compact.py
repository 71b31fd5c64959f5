"""A record of how sweeps.json was made (not a tool): python compact.py out.json NAME=RUN/eval/eval.json ...
Each sweep's long-range rows as [task, length, depth, doc, exact, lods, decoys]: exact and decoys one 0/1 per
variant in 'variants' order (decoys: the answer was another record's value), lods the needle's coarsest LOD per
variant in that order ('-' where the variant has no layout, recency). Names already in out.json are kept unless
given again."""
import json, os, sys
out = json.load(open(sys.argv[1])) if os.path.exists(sys.argv[1]) else {}
out["format"] = "rows: [task, length, depth, doc, exact, lods, decoys]; see compact.py"
for arg in sys.argv[2:]:
    name, path = arg.split("=", 1)
    lr = json.load(open(path))["long_range"]
    vs = lr["variants"]
    out[name] = {"draw_seed": lr["draw_seed"], "budget": lr["budget"], "seconds": lr["seconds"], "variants": vs,
                 "rows": [[r["task"], r["length"], r["depth"], r["doc"],
                           "".join("1" if r["exact"][v] else "0" for v in vs),
                           "".join(str(r["needle_lod"][v]) if v in r["needle_lod"] else "-" for v in vs),
                           "".join("1" if r.get("copied_decoy", {}).get(v) else "0" for v in vs)]
                          for r in lr["rows"]]}
json.dump(out, open(sys.argv[1], "w"), separators=(",", ":"))
