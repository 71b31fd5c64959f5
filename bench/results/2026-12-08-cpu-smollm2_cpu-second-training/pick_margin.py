"""From branch_pick.py's lines: how often the kept path is the queried needle's, and how often it would be with a
margin m that LensNet's own zoom must be beaten by (the unchanged layout is tried last against the kept fit with
no margin of its own, as with prompt_margin 0). "mapped": documents whose queried path is known (rank <= paths);
"agree": of those, the kept path being the queried one matches the needle ending at LOD0 (checks the mapping).

    python pick_margin.py pick.jsonl [margins, default 0,0.5,1,2,4,8]
"""
import json
import sys
from collections import defaultdict

margins = [float(x) for x in (sys.argv[2] if len(sys.argv) > 2 else "0,0.5,1,2,4,8").split(",")]


def keep(fits: list[float], m: float) -> int:
    kept, kf = 0, fits[0] + m
    for j in range(1, len(fits) - 1):
        if fits[j] > kf:
            kept, kf = j, fits[j]
    return len(fits) - 1 if fits[-1] > kf else kept


rows = [json.loads(line) for line in open(sys.argv[1])]
cells = defaultdict(list)
for r in rows:
    cells[(r["task"], r["multiple"], r["depth"])].append(r)
head = " | ".join(f"m={m:g}" for m in margins)
print(f"| task | mult | depth | n | raw after (actual) | mapped | agree | {head} |")
print("|---" * (7 + len(margins)) + "|")
tot = defaultdict(lambda: defaultdict(int))
for key in sorted(cells):
    rs = cells[key]
    raw = sum(r["needle_lod"] == 0 for r in rs)
    mapped = [r for r in rs if r["fits"] and r["rank"] is not None and r["rank"] <= len(r["fits"]) - 1]
    agree = sum((r["kept"] == r["rank"] - 1) == (r["needle_lod"] == 0) for r in mapped)
    wins = [sum(keep(r["fits"], m) == r["rank"] - 1 for r in mapped) for m in margins]
    t = tot[key[0]]
    t["n"] += len(rs); t["raw"] += raw; t["mapped"] += len(mapped); t["agree"] += agree
    for m, w in zip(margins, wins):
        t[m] += w
    print(f"| {key[0]} | {key[1]}x | {key[2]} | {len(rs)} | {raw} | {len(mapped)} | {agree} | "
          + " | ".join(map(str, wins)) + " |")
for task, t in tot.items():
    print(f"| {task} | all | | {t['n']} | {t['raw']} | {t['mapped']} | {t['agree']} | "
          + " | ".join(str(t[m]) for m in margins) + " |")
