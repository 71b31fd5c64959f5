"""Per passkey bucket of a task-suite JSON: `focused`, `salience` and the oracle's documents read, `focused` / oracle,
and for each document `focused` missed: its refocus's edit count, the needle's and answer's LOD when the answer began,
and whether `salience` read it."""
import json
import sys

for path in sys.argv[1:]:
    d = json.load(open(path))
    print(f"{path}: draw {d['draw_seed']}, {d['n_per_cell']} a bucket, {d['positions']} positions")
    rows = [r for r in d["rows"] if r["task"] == "passkey"]
    for mult in d["multiples"]:
        for depth in d["depths"]:
            cell = [r for r in rows if r["multiple"] == mult and r["depth"] == depth]
            f, s, o = (sum(r["score"][v] for r in cell) for v in ("focused", "salience", "oracle"))
            print(f"  {mult}x depth {depth}: focused {f:.0f}, salience {s:.0f}, oracle {o:.0f} of {len(cell)}; "
                  f"focused / oracle {f / o:.2f}" + ("  UNDER 0.8" if f < 0.8 * o else ""))
            for r in cell:
                if r["score"]["focused"] < 1:
                    print(f"    doc {r['doc']}: edits {r['edits']['focused']}, needle LOD {r['needle_lod']['focused']}, "
                          f"answer LOD {r['answer_lod']['focused']}, salience {r['score']['salience']:.0f}")
