"""expand_top 1 minus 0, per document, on the same nets (seed 1, trained with slot positions) and draw at W = 64:
the two eval.json files of `mc_eval.py --run-dir <copy> eval.draw_seed=D allocator.expand_top={0,1}`. Also each
file's `focused` - `compressed` (the "no harm" reading) and recall accuracy."""
import json
import sys

from mc.eval.stats import paired_diff_ci

off, on = (json.load(open(p)) for p in sys.argv[1:3])
assert [d["doc"] for d in off["per_doc"]] == [d["doc"] for d in on["per_doc"]]  # the same documents, in order
fmt = "{mean:+.3f} [{lo:+.3f}, {hi:+.3f}]".format
for metric in ("corpus_tail_loss", "corpus_stream_loss", "recall_tail_loss", "recall_stream_loss", "recall_answer_nll"):
    rows = [(d1["values"][metric]["focused"], d0["values"][metric]["focused"])
            for d0, d1 in zip(off["per_doc"], on["per_doc"]) if metric in d0["values"]]
    diff = paired_diff_ci([r[0] for r in rows], [r[1] for r in rows])
    harm = []
    for name, e in (("top 0", off), ("top 1", on)):
        pairs = [(d["values"][metric]["focused"], d["values"][metric]["compressed"])
                 for d in e["per_doc"] if metric in d["values"]]
        harm.append(f"{name} focused - compressed " + fmt(**paired_diff_ci([p[0] for p in pairs], [p[1] for p in pairs])))
    print(f"{metric} (n={len(rows)}): focused top 1 - top 0 {fmt(**diff)}; " + "; ".join(harm))
for name, e in (("top 0", off), ("top 1", on)):
    acc = e["metrics"]["recall_accuracy"]
    print(f"{name}: recall accuracy " + ", ".join(f"{v} {acc[v]['mean']:.3f}" for v in acc) + f"; {e['seconds']:.0f} s")
