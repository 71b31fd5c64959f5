"""Where a session read's refocuses made edits: documents whose first refocus (at the prefix's end, never scheduled)
edited, and the later (scheduled) refocuses with edits, from each eval.json's per-document `session_edits`.
Usage: python edits.py NAME=EVAL_JSON ..."""
import json
import sys

for arg in sys.argv[1:]:
    name, path = arg.split("=", 1)
    edits = [d["session_edits"]["focused"] for d in json.load(open(path))["per_doc"] if d.get("session_edits")]
    later = [e for doc in edits for e in doc[1:]]
    print(f"{name}: first refocus with edits in {sum(doc[0] > 0 for doc in edits)} of {len(edits)} documents; "
          f"later refocuses with edits {sum(e > 0 for e in later)} of {len(later)}")
