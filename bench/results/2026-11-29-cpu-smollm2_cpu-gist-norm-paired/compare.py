"""Pair two task-suite files (same draw, same documents) and print counts per cell, per depth, and paired wins.

    python compare.py A.json B.json [variant ...]

A and B must hold the same documents (checked by their answers); the variants default to every variant in both.
Prints, per task and multiple, each variant's correct count in A and B, the depth buckets' counts, how often the
answer's tokens were at LOD0 when the answer began, and the documents one read and the other did not.
"""
import json
import sys


def main() -> None:
    a_path, b_path, *variants = sys.argv[1:]
    a = json.load(open(a_path))["rows"]
    b = json.load(open(b_path))["rows"]
    if [x["answers"] for x in a] != [y["answers"] for y in b]:
        raise SystemExit("the two files do not hold the same documents (different draws?)")
    if not variants:
        variants = [v for v in a[0]["score"] if v in b[0]["score"]]
    cells = sorted({(x["task"], x["multiple"]) for x in a}, key=lambda c: (c[0] != "passkey", c))
    depths = sorted({x["depth"] for x in a})
    print(f"A = {a_path}\nB = {b_path}\n")
    print("| task, multiple | variant | A | B | A by depth | B by depth | answer at LOD0 A / B | only A / only B |")
    print("|---|---|---|---|---|---|---|---|")
    for task, mult in cells:
        pairs = [(x, y) for x, y in zip(a, b) if x["task"] == task and x["multiple"] == mult]
        for v in variants:
            sa = sum(x["score"][v] for x, _ in pairs)
            sb = sum(y["score"][v] for _, y in pairs)
            da = ", ".join(f"{sum(x['score'][v] for x, _ in pairs if x['depth'] == d):g}" for d in depths)
            db = ", ".join(f"{sum(y['score'][v] for _, y in pairs if y['depth'] == d):g}" for d in depths)
            la = sum(x["answer_lod"].get(v) == 0 for x, _ in pairs)
            lb = sum(y["answer_lod"].get(v) == 0 for _, y in pairs)
            only_a = sum(x["score"][v] > y["score"][v] for x, y in pairs)
            only_b = sum(y["score"][v] > x["score"][v] for x, y in pairs)
            print(f"| {task} {mult}x | {v} | {sa:g} | {sb:g} | {da} | {db} | {la} / {lb} | {only_a} / {only_b} |")
    print(f"\n{len(a)} documents; depth buckets {depths}")


if __name__ == "__main__":
    main()
