"""Two W = 64 evaluations of the same nets and documents (A: one search, B: another), paired per document.

    PYTHONPATH=. python paired_focus.py A/eval.json B/eval.json

Per metric: focused - compressed in A and in B (each paired within its own run), and B - A of `focused` itself
(paired over the documents both read), with 95% normal intervals (mc.eval.stats)."""
import json
import sys

from mc.eval.stats import fmt_ci, paired_diff_ci

a, b = (json.load(open(p)) for p in sys.argv[1:3])
for e, name in ((a, "A"), (b, "B")):
    inf = e["settings"]["refocus"]["inference"]
    print(f"{name}: {sys.argv[1 if name == 'A' else 2]} draw {e['settings']['draw_seed']} "
          f"room_fit {inf.get('branch_room_fit', False)} unchanged {inf['branch_unchanged']} {e['seconds']:.0f} s")
key = lambda d: (d["source"], d["doc"])  # noqa: E731
rows_b = {key(d): d for d in b["per_doc"]}
for metric in ("corpus_tail_loss", "recall_tail_loss", "recall_answer_nll", "recall_accuracy"):
    pairs = [(d, rows_b[key(d)]) for d in a["per_doc"] if metric in d["values"] and key(d) in rows_b]
    comp = [float(x["values"][metric]["compressed"]) for x, _ in pairs]
    # the same nets and documents: `compressed` makes no edit, so it reads alike up to the float order of the thread count
    assert max(abs(c - float(y["values"][metric]["compressed"])) for c, (_, y) in zip(comp, pairs)) < 2e-3, \
        "not the same nets and documents"
    fa = [float(x["values"][metric]["focused"]) for x, _ in pairs]
    fb = [float(y["values"][metric]["focused"]) for _, y in pairs]
    print(f"  {metric:18s} n={len(pairs):2d}  focused-compressed A {fmt_ci(paired_diff_ci(fa, comp))}"
          f"  B {fmt_ci(paired_diff_ci(fb, comp))}  focused B-A {fmt_ci(paired_diff_ci(fb, fa))}"
          f"  (B lower {sum(y < x for x, y in zip(fa, fb))}, higher {sum(y > x for x, y in zip(fa, fb))})")
