"""The session read beside the chunked tail loss, from evaluation files (eval.json of scripts/mc_eval.py).

    python bench/results/2026-12-06-cpu-smollm2_cpu-session-read/summarise.py EVAL.json [EVAL.json ...]

Prints per file and source the variants' means, the paired differences the bars read (95% intervals), and for the
session read how many documents the refocusing session read worse / better than the never-refocused one and the
edits per refocus of the focused and random sessions.
"""
import json
import sys

PAIRS = ("focused-compressed", "focused-recency", "focused-random", "compressed-recency")
VARIANTS = ("full", "recency", "compressed", "focused", "random")


def fmt(ci):
    return f"{ci['mean']:+.3f} [{ci['lo']:+.3f}, {ci['hi']:+.3f}]"


for path in sys.argv[1:]:
    ev = json.load(open(path))
    s = ev["settings"]
    print(f"## {path}: draw {s['draw_seed']}, session_tail {s.get('session_tail')}, refocus every "
          f"{s.get('refocus_interval')}, {ev['documents']['n_corpus']} + {ev['documents']['n_recall']} documents, "
          f"{ev['seconds']} s")
    for src in ("corpus", "recall"):
        for kind in ("tail", "stream", "session"):
            m = ev["metrics"].get(f"{src}_{kind}_loss")
            if not m:
                continue
            means = "  ".join(f"{v} {m[v]['mean']:.3f}" for v in VARIANTS)
            pairs = "  ".join(f"{p} {fmt(ev['paired'][f'{src}_{kind}_loss'][p])}" for p in PAIRS)
            print(f"{src:6s} {kind:8s} {means}\n{'':15s} {pairs}")
        rows = [r for r in ev["per_doc"] if r["source"] == src and "session_edits" in r]
        if rows:
            k = f"{src}_session_loss"
            worse = sum(r["values"][k]["focused"] > r["values"][k]["compressed"] + 1e-6 for r in rows)
            better = sum(r["values"][k]["focused"] < r["values"][k]["compressed"] - 1e-6 for r in rows)
            fe = [x for r in rows for x in r["session_edits"]["focused"]]
            re_ = [x for r in rows for x in r["session_edits"]["random"]]
            print(f"{'':15s} session: focused worse than compressed in {worse}, better in {better} of {len(rows)}; "
                  f"edits per refocus focused {sum(fe) / len(fe):.2f}, random {sum(re_) / len(re_):.2f}; "
                  f"refocuses without an edit {sum(x == 0 for x in fe)} of {len(fe)}")
    print()
