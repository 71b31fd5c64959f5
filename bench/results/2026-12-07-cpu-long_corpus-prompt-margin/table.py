"""The session read before -> after, one Markdown row per seed: focused - compressed (the evaluation's paired
interval, nats/token, 4 decimals) on corpus text and recall documents, refocuses with edits checked, and focused's own
paired change.

    python table.py LABEL OLD_EVAL_JSON NEW_EVAL_JSON [LABEL OLD NEW ...]
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository root
from mc.eval.stats import paired_diff_ci  # noqa: E402


def ci(c: dict) -> str:
    return f"{c['mean']:+.4f} [{c['lo']:+.4f}, {c['hi']:+.4f}]"


def focused(ev: dict, src: str) -> dict:
    return {d["doc"]: d["values"][f"{src}_session_loss"]["focused"] for d in ev["per_doc"] if d["source"] == src}


print("| seed (draw) | corpus, before -> after | recall documents, before -> after | checked, before -> after | "
      "`focused`'s paired change (corpus; recall) |")
print("|---|---|---|---|---|")
args = sys.argv[1:]
for label, a_path, b_path in zip(args[::3], args[1::3], args[2::3]):
    a, b = json.load(open(a_path)), json.load(open(b_path))
    assert a["settings"]["draw_seed"] == b["settings"]["draw_seed"]
    cells, change = [], []
    for src in ("corpus", "recall"):
        pa, pb = (e["paired"][f"{src}_session_loss"]["focused-compressed"] for e in (a, b))
        cells.append(f"{ci(pa)} -> {ci(pb)}")
        fa, fb = focused(a, src), focused(b, src)
        assert fa.keys() == fb.keys(), "not the same documents"
        change.append(ci(paired_diff_ci([fb[k] for k in fa], [fa[k] for k in fa])))
    checked = [sum((d.get("session_checks") or {}).get("checked", 0) for d in e["per_doc"]) for e in (a, b)]
    print(f"| {label} ({a['settings']['draw_seed']}) | {cells[0]} | {cells[1]} | {checked[0]} -> {checked[1]} | "
          f"{'; '.join(change)} |")
