"""Pair the refocus check's session reads (check_probe.py's JSON) with the session-read record's evaluation (no check).

    python bench/results/2026-12-06-cpu-smollm2_cpu-refocus-check/compare.py PROBE_JSON EVAL_JSON [K]

Matches documents by name and source, requires the same `compressed` session loss (the same documents and session),
and prints per source: focused - compressed without the check (the evaluation's) and with it (K), and their
difference, each a paired 95% interval, with the refocuses checked and undone.
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository root
from mc.eval.stats import paired_diff_ci  # noqa: E402

probe, ev = json.loads(Path(sys.argv[1]).read_text()), json.loads(Path(sys.argv[2]).read_text())
k = sys.argv[3] if len(sys.argv) > 3 else str(probe["ks"][-1])
base = {(r["doc"], r["source"]): r["values"][f"{r['source']}_session_loss"] for r in ev["per_doc"]}
print(f"{Path(sys.argv[1]).name} against {Path(sys.argv[2]).name}, refocus_check={k}")
for src in ("corpus", "recall"):
    rows = [r for r in probe["rows"] if r["source"] == src]
    missing = [r["name"] for r in rows if (r["name"], src) not in base]
    if missing:
        sys.exit(f"{src}: {len(missing)} probe documents are not in the evaluation (another draw?), e.g. {missing[0]}")
    off = [base[(r["name"], src)] for r in rows]
    drift = max(abs(r["compressed"] - o["compressed"]) for r, o in zip(rows, off))
    assert drift < 1e-5, f"{src}: compressed differs from the evaluation's by {drift} (other documents?)"
    comp = [r["compressed"] for r in rows]
    f0, fk = [o["focused"] for o in off], [r[k]["loss"] for r in rows]

    def fmt(ci):
        return f"{ci['mean']:+.3f} [{ci['lo']:+.3f}, {ci['hi']:+.3f}]"
    worse0 = sum(a > b for a, b in zip(f0, comp))
    worsek = sum(a > b for a, b in zip(fk, comp))
    print(f"  {src} ({len(rows)} documents): focused - compressed without the check {fmt(paired_diff_ci(f0, comp))} "
          f"({worse0} worse), with it {fmt(paired_diff_ci(fk, comp))} ({worsek} worse); with - without "
          f"{fmt(paired_diff_ci(fk, f0))}; undone {sum(r[k]['undone'] for r in rows)} of "
          f"{sum(r[k]['checked'] for r in rows)} checked")
