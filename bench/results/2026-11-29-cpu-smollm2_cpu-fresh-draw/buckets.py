"""Per (task, multiple, depth) cell: documents read per variant, focused / oracle and oracle / full, and whether
the issue's bars hold (focused >= 0.8 oracle at 8x and 16x; oracle >= 0.9 full at 8x).

    python buckets.py tasks.json [more.json ...]
    python buckets.py --paired A B tasks.json [more.json ...]   # score(A) - score(B), paired by document
"""
import json
import sys
from collections import defaultdict

ORDER = ["full", "oracle", "focused", "salience", "recency", "compressed", "random"]


def main() -> None:
    for path in sys.argv[1:]:
        d = json.load(open(path))
        rows = d["rows"]
        cells = defaultdict(lambda: defaultdict(float))
        n = defaultdict(int)
        for r in rows:
            key = (r["task"], r["multiple"], r["depth"])
            n[key] += 1
            for v, s in r["score"].items():
                cells[key][v] += s
        variants = [v for v in ORDER if v in rows[0]["score"]]
        print(f"{path} (draw {d.get('draw_seed')})\n")
        print("| task | multiple | depth | n | " + " | ".join(variants) + " | focused / oracle | oracle / full |")
        print("|---" * (6 + len(variants)) + "|")
        tot = defaultdict(lambda: defaultdict(float))
        for key in sorted(cells):
            c = cells[key]
            fo = c["focused"] / c["oracle"] if c.get("oracle") else float("nan")
            of = c["oracle"] / c["full"] if c.get("full") else float("nan")
            print(f"| {key[0]} | {key[1]}x | {key[2]} | {n[key]} | " + " | ".join(f"{c[v]:g}" for v in variants)
                  + f" | {fo:.2f} | {of:.2f} |")
            for v in variants:
                tot[(key[0], key[1])][v] += c[v]
        print()
        for k, c in sorted(tot.items()):
            print(f"{k[0]} {k[1]}x: " + ", ".join(f"{v} {c[v]:g}" for v in variants))
        print()



def paired(path: str, a: str, b: str) -> None:
    """Per task: mean of score(a) - score(b) over the same documents, normal 95% interval (as mc.eval.stats)."""
    import math
    rows = json.load(open(path))["rows"]
    for task in sorted({r["task"] for r in rows}):
        d = [r["score"][a] - r["score"][b] for r in rows if r["task"] == task and a in r["score"] and b in r["score"]]
        m = sum(d) / len(d)
        sd = math.sqrt(sum((x - m) ** 2 for x in d) / (len(d) - 1)) if len(d) > 1 else 0.0
        h = 1.959964 * sd / math.sqrt(len(d))
        print(f"{path}: {task} {a} - {b} = {m:+.3f} [{m - h:+.3f}, {m + h:+.3f}] over {len(d)} documents")


if __name__ == "__main__":
    if sys.argv[1] == "--paired":
        for p in sys.argv[4:]:
            paired(p, sys.argv[2], sys.argv[3])
    else:
        main()
