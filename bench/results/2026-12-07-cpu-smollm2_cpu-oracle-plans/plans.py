"""Per passkey bucket of a task-suite file: `focused`, the oracle (the best of its plans per document) and the
`neighbours` plan alone, which the kept plans give exactly: ties keep the first plan (`neighbours`), so a document
that kept another plan read it and not `neighbours`, and one that kept `neighbours` read it with the oracle's score.

    python plans.py ../2026-12-06-cpu-smollm2_cpu-suite-fresh-draw/passkey-s0.json ...
"""
import json
import sys

print("| file | multiple | depth | focused | oracle (best of plans) | `neighbours` plan alone | focused / oracle | "
      "focused / `neighbours` |")
print("|---|---|---|---|---|---|---|---|")
for path in sys.argv[1:]:
    res = json.load(open(path))
    for m in res["multiples"]:
        for d in res["depths"]:
            rows = [r for r in res["rows"] if r["multiple"] == m and r["depth"] == d]
            if "oracle_plans" in rows[0]:  # files since 2026-12-07 record each plan's score
                nb = sum(r["oracle_plans"]["neighbours"] for r in rows)
            else:
                nb = sum(r["score"]["oracle"] for r in rows if r["oracle_plan"] == "neighbours")
            f = sum(r["score"]["focused"] for r in rows)
            o = sum(r["score"]["oracle"] for r in rows)
            ratio = lambda a, b: f"{a / b:.2f}" if b else "n/a"  # noqa: E731
            print(f"| {path.split('/')[-1]} | {m}x | {d} | {f:g} | {o:g} | {nb:g} | {ratio(f, o)} | {ratio(f, nb)} |")
