"""A record of how sweeps.json was made (not a tool): python compact.py out.json NAME=RUN/eval/eval.json ...
Each run's long-range rows as [task, length, depth, doc, exact (one 0/1 per variant), focused_branch, needle_lod of
focused]; existing names in out.json are kept unless given again."""
import json, os, sys
out = json.load(open(sys.argv[1])) if os.path.exists(sys.argv[1]) else {}
out["format"] = ("rows: [task, length, depth, doc, exact, branch, lod], exact one 0/1 per variant in 'variants' order; "
                 "branch: the path the focused refocus kept; lod: the needle's coarsest LOD in focused's layout")
for arg in sys.argv[2:]:
    name, path = arg.split("=", 1)
    lr = json.load(open(path))["long_range"]
    vs = lr["variants"]
    out[name] = {"draw_seed": lr["draw_seed"], "seconds": lr["seconds"], "variants": vs,
                 "rows": [[r["task"], r["length"], r["depth"], r["doc"], "".join("1" if r["exact"][v] else "0" for v in vs),
                           r.get("branch"), r["needle_lod"].get("focused")] for r in lr["rows"]]}
json.dump(out, open(sys.argv[1], "w"), separators=(",", ":"))
