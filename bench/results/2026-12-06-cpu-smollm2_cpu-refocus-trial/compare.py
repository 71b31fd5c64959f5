"""Pair a mode of trial_probe.py's session reads with the refocus-check record's probe of the same nets and draw.

    python bench/results/2026-12-06-cpu-smollm2_cpu-refocus-trial/compare.py NEW_JSON CHECK_JSON MODE

CHECK_JSON: ``../2026-12-06-cpu-smollm2_cpu-refocus-check/probe-<run>-draw<draw>.json`` (refocus_check 16, no trial or
fallback: the preset before), or an evaluation's ``eval.json`` whose preset had the check (its session read's
``focused``; seed 5's ``run-ck_s5/eval.json`` there). Matches documents by name and source, requires the same ``compressed`` session loss,
and prints per source: focused - compressed with the check alone and with MODE, and MODE - check, each a paired 95%
interval over the documents.
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository root
from mc.eval.stats import paired_diff_ci  # noqa: E402

new, old, mode = json.loads(Path(sys.argv[1]).read_text()), json.loads(Path(sys.argv[2]).read_text()), sys.argv[3]
if "per_doc" in old:  # an evaluation: its session read, refocus_check 16
    before = {(r["doc"], r["source"]): {"compressed": r["values"][f"{r['source']}_session_loss"]["compressed"],
                                        "16": {"loss": r["values"][f"{r['source']}_session_loss"]["focused"]}}
              for r in old["per_doc"]}
else:
    before = {(r["name"], r["source"]): r for r in old["rows"]}
print(f"{Path(sys.argv[1]).name} ({mode}) against {Path(sys.argv[2]).name} (refocus_check 16)")


def ci(a, b) -> str:
    c = paired_diff_ci(a, b)
    return f"{c['mean']:+.3f} [{c['lo']:+.3f}, {c['hi']:+.3f}]"


for src in ("corpus", "recall"):
    rows = [r for r in new["rows"] if r["source"] == src]
    olds = [before[(r["name"], src)] for r in rows]  # KeyError: not the same documents
    drift = max(abs(r["compressed"] - o["compressed"]) for r, o in zip(rows, olds))
    assert drift < 1e-5, f"{src}: compressed differs from the check probe's by {drift} (other documents?)"
    comp, chk, m = [r["compressed"] for r in rows], [o["16"]["loss"] for o in olds], [r[mode]["loss"] for r in rows]
    counts = {c: sum(r[mode][c] for r in rows) for c in ("undone", "checked", "taken", "trials", "fell_back", "fallbacks")}
    print(f"{src} ({len(rows)} documents): check - compressed {ci(chk, comp)}; {mode} - compressed {ci(m, comp)}; "
          f"{mode} - check {ci(m, chk)}; undone {counts['undone']} of {counts['checked']}, taken {counts['taken']} of "
          f"{counts['trials']} trials, fell back {counts['fell_back']} of {counts['fallbacks']}")
