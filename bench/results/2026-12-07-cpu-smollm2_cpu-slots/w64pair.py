"""Slot minus bounded positions, per document, on the same nets (seed 2) and draw (483744) at W = 64: the two
eval.json files of `mc_eval.py --run-dir <copy> eval.draw_seed=483744 mc.positions={bounded,slots}`."""
import json
import sys

from mc.eval.stats import paired_diff_ci

b, s = (json.load(open(p)) for p in sys.argv[1:3])
assert [d["doc"] for d in b["per_doc"]] == [d["doc"] for d in s["per_doc"]]  # the same documents, in order
for metric in ("corpus_tail_loss", "corpus_stream_loss", "recall_tail_loss", "recall_stream_loss", "recall_answer_nll"):
    parts = []
    for var in ("compressed", "focused"):
        rows = [(ds["values"][metric][var], db["values"][metric][var])
                for db, ds in zip(b["per_doc"], s["per_doc"]) if metric in db["values"]]
        ci = paired_diff_ci([r[0] for r in rows], [r[1] for r in rows])
        parts.append("{var} {mean:+.3f} [{lo:+.3f}, {hi:+.3f}]".format(var=var, **ci))
    print(f"{metric} slots - bounded (n={len(rows)}): " + "; ".join(parts))
for name, e in (("bounded", b), ("slots", s)):
    acc = e["metrics"]["recall_accuracy"]
    print(f"{name}: recall accuracy " + ", ".join(f"{v} {acc[v]['mean']:.3f}" for v in acc)
          + "; compressed - recency corpus tail " + "{mean:+.3f} [{lo:+.3f}, {hi:+.3f}]".format(
              **e["paired"]["corpus_tail_loss"]["compressed-recency"]))
