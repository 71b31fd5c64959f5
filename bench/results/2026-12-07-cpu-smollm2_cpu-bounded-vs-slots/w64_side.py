"""Plain text at W = 64 on one draw, two sets of nets side by side: each file's variant means and its own paired
differences (the per-document values of the slot-trained runs' evaluations were not kept, so the two sides are
compared as means over the same documents, not paired). `full` equal on both sides checks the documents match.

    python w64_side.py LABEL_A A.json LABEL_B B.json
"""
import json
import sys

args = sys.argv[1:]
runs = [(args[i], json.load(open(args[i + 1]))) for i in range(0, len(args), 2)]
for label, e in runs:
    print(f"{label}: draw {e['settings']['draw_seed']}, {e['seconds']:.0f} s")
for metric in ("corpus_tail_loss", "corpus_stream_loss", "recall_tail_loss", "recall_answer_nll", "recall_accuracy"):
    print(f"\n{metric}")
    for label, e in runs:
        m, p = e["metrics"].get(metric), e["paired"].get(metric)
        if m is None:
            continue
        means = ", ".join(f"{v} {c['mean']:.3f}" for v, c in m.items())
        pairs = "; ".join(f"{k} {c['mean']:+.3f} [{c['lo']:+.3f}, {c['hi']:+.3f}]"
                          for k, c in (p or {}).items() if k in ("compressed-recency", "focused-compressed"))
        print(f"  {label}: {means}\n  {' ' * len(label)}  {pairs}")
