"""Margins of the zooms refocuses kept (best zoom path's fit - the unchanged layout's, nats) from fits.py's logs.

    python margins.py SESSION_LOG.json GRID_LOG.json
"""
import json
import sys
from collections import Counter


def margin(r):
    f = r["fits"]
    return None if len(f) < 2 else max(f[:-1]) - f[-1]  # the unchanged layout's fit is the last


def show(name, sel):
    kept = [margin(r) for r in sel if r["edits"] > 0 and margin(r) is not None]
    print(f"{name}: {len(sel)} refocuses, {len(kept)} kept a zoom; of those, margin < 0.5 / 1 / 2 nats: "
          f"{sum(m < 0.5 for m in kept)} / {sum(m < 1 for m in kept)} / {sum(m < 2 for m in kept)}")


sess, grid = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
first = min(r["n"] for r in sess if not r["scheduled"])
show(f"session read, the refocus at the prefix's end ({first} tokens, plain text)",
     [r for r in sess if r["n"] == first and not r["scheduled"]])
show("session read, refocuses on schedule", [r for r in sess if r["scheduled"]])
show("evaluation, at a recall question (2045 tokens)", [r for r in sess if r["n"] == 2045])
show("evaluation, before a 16-token tail (2032 tokens: corpus and recall documents)", [r for r in sess if r["n"] == 2032])
show("honest grid, at its questions (4x-64x)", [r for r in grid if r["n"] > 128])
small = Counter(r["n"] for r in grid if r["n"] > 128 and r["edits"] > 0 and margin(r) is not None and margin(r) < 1)
print("  grid zooms kept by < 1 nat, by session length (tokens):", dict(sorted(small.items())))
