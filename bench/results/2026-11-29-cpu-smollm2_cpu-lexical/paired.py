"""Paired per-document difference of one variant between two task-suite reads of the same documents.

    python paired.py VARIANT A.json B.json [A2.json B2.json ...]   # B - A, mean and a normal 95% interval
"""
import json
import math
import sys


def rows(path):
    return {(r["task"], r["multiple"], r["depth"], r["doc"]): r["score"] for r in json.load(open(path))["rows"]}


def main():
    variant, files = sys.argv[1], sys.argv[2:]
    diffs = []
    for a_path, b_path in zip(files[::2], files[1::2]):
        a, b = rows(a_path), rows(b_path)
        d = [b[k][variant] - a[k][variant] for k in a if k in b and variant in a[k] and variant in b[k]]
        diffs += d
        print(f"{b_path}: {len(d)} documents, {sum(x > 0 for x in d)} gained, {sum(x < 0 for x in d)} lost")
    n = len(diffs)
    mean = sum(diffs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in diffs) / (n - 1))
    half = 1.96 * sd / math.sqrt(n)
    print(f"{variant}: B - A over {n} documents: {mean:+.3f} [{mean - half:+.3f}, {mean + half:+.3f}]")


if __name__ == "__main__":
    main()
