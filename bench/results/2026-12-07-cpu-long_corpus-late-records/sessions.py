"""The session read's "no harm" line per run: focused - compressed (the evaluation's paired interval, nats/token) on
corpus text and recall documents. Usage: python sessions.py LABEL=EVAL_JSON ..."""
import json
import sys

for arg in sys.argv[1:]:
    label, path = arg.split("=", 1)
    ev = json.load(open(path))
    cells = []
    for src in ("corpus", "recall"):
        c = ev["paired"][f"{src}_session_loss"]["focused-compressed"]
        cells.append(f"{src} {c['mean']:+.4f} [{c['lo']:+.4f}, {c['hi']:+.4f}]")
    print(f"{label} (draw {ev['settings']['draw_seed']}): " + "; ".join(cells))
