"""Documents read at depth 0.02 per length (focused / recency / compressed / oracle), one line per task, for each
honest-grid eval/eval.json given. Usage: python depth_by_length.py EVAL_JSON ..."""
import json, sys
for p in sys.argv[1:]:
    lr = json.load(open(p))["long_range"]; w = lr["base_window"]
    print(p.split('/')[-3])
    for t in lr["tasks"]:
        cells = []
        for m in (4, 12, 16, 24, 32, 48, 64):
            rs = [r for r in lr["rows"] if r["task"] == t and r["length"] == m * w and r["depth"] == 0.02]
            cells.append(f"{m}x " + "/".join(str(sum(r["exact"][v] for r in rs)) for v in ("focused", "recency", "compressed", "oracle")))
        print(f"  {t:22s} " + "  ".join(cells))
