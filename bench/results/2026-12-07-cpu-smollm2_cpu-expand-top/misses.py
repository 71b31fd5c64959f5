"""Each passkey document `focused` missed in a task-suite JSON: its refocus's edit count, the needle's and the answer's
coarsest LOD when the answer began, and whether `salience` read it. (Counts per bucket: buckets.py of
../2026-11-29-cpu-smollm2_cpu-fresh-draw/.)"""
import json
import sys

for path in sys.argv[1:]:
    print(path)
    for r in json.load(open(path))["rows"]:
        if r["task"] == "passkey" and r["score"]["focused"] < 1:
            print(f"  {r['multiple']}x depth {r['depth']} doc {r['doc']}: edits {r['edits']['focused']}, needle LOD "
                  f"{r['needle_lod']['focused']}, answer LOD {r['answer_lod']['focused']}, salience {r['score']['salience']:.0f}")
