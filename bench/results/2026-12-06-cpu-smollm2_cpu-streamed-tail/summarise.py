"""Chunked and token-by-token tail losses side by side, from evaluation files (eval.json of scripts/mc_eval.py).

    python bench/results/2026-12-06-cpu-smollm2_cpu-streamed-tail/summarise.py EVAL.json [EVAL.json ...]

Prints per file and source the variants' means and the paired differences the bars read, each with its 95% interval.
"""
import json
import sys

PAIRS = ("focused-compressed", "focused-recency", "focused-random", "compressed-recency")


def fmt(ci):
    return f"{ci['mean']:+.3f} [{ci['lo']:+.3f}, {ci['hi']:+.3f}]"


for path in sys.argv[1:]:
    ev = json.load(open(path))
    s = ev["settings"]
    print(f"## {path}: draw {s['draw_seed']}, {ev['documents']['n_corpus']} + {ev['documents']['n_recall']} documents, "
          f"{ev['seconds']} s")
    for src in ("corpus", "recall"):
        for kind in ("tail", "stream"):
            m = ev["metrics"].get(f"{src}_{kind}_loss")
            if not m:
                continue
            means = "  ".join(f"{v} {m[v]['mean']:.3f}" for v in ("full", "recency", "compressed", "focused", "random"))
            pairs = "  ".join(f"{p} {fmt(ev['paired'][f'{src}_{kind}_loss'][p])}" for p in PAIRS)
            print(f"{src:6s} {'chunked' if kind == 'tail' else 'streamed':8s} {means}\n{'':15s} {pairs}")
    print()
