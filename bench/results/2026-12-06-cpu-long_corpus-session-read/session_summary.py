"""The session read of evaluation JSONs: focused - compressed / random and compressed - recency as the evaluation
paired them, the refocus check's counts, and focused's change between two reads of the same documents.

    python session_summary.py NAME=EVAL_JSON [NAME=EVAL_JSON ...] [--change A_JSON B_JSON ...]
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository root
from mc.eval.stats import paired_diff_ci  # noqa: E402


def fmt(c: dict) -> str:
    return f"{c['mean']:+.3f} [{c['lo']:+.3f}, {c['hi']:+.3f}]"


def summary(name: str, path: str) -> str:
    ev = json.load(open(path))
    parts = []
    for src in ("corpus", "recall"):
        for pair in ("focused-compressed", "focused-random", "compressed-recency"):
            c = (ev["paired"].get(f"{src}_session_loss") or {}).get(pair)
            if c:
                parts.append(f"{src} {pair} {fmt(c)}")
    checks = [d.get("session_checks") or {} for d in ev["per_doc"]]
    checked, undone = sum(c.get("checked", 0) for c in checks), sum(c.get("undone", 0) for c in checks)
    return f"{name} (draw {ev['settings'].get('draw_seed')}): " + "; ".join(parts) + f"; undone {undone} of {checked} checked"


def change(a_path: str, b_path: str) -> str:
    """focused's session loss, b - a per document (the same documents, checked by name), by source."""
    a, b = json.load(open(a_path)), json.load(open(b_path))
    out = []
    for src in ("corpus", "recall"):
        da = {d["doc"]: d["values"][f"{src}_session_loss"]["focused"] for d in a["per_doc"] if d["source"] == src}
        db = {d["doc"]: d["values"][f"{src}_session_loss"]["focused"] for d in b["per_doc"] if d["source"] == src}
        assert da.keys() == db.keys(), "not the same documents"
        out.append(f"{src} {fmt(paired_diff_ci([db[k] for k in da], [da[k] for k in da]))}")
    return f"focused, {Path(b_path).name} - {Path(a_path).name}: " + "; ".join(out)


args = sys.argv[1:]
cut = args.index("--change") if "--change" in args else len(args)
for arg in args[:cut]:
    print(summary(*arg.split("=", 1)))
pairs = args[cut + 1:]
for a_path, b_path in zip(pairs[::2], pairs[1::2]):
    print(change(a_path, b_path))
