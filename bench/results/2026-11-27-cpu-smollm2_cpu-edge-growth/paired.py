"""Paired old vs new task-suite files (same draw): per task x multiple sums, and passkey buckets where focused >= 0.8 oracle."""
import json, sys
def load(p): return json.load(open(p))
def cell_sum(rows, t, m, v):
    return sum(r["score"][v] for r in rows if r["task"] == t and r["multiple"] == m)
def run(old_p, new_p, label):
    old, new = load(old_p), load(new_p)
    assert old["draw_seed"] == new["draw_seed"], (old["draw_seed"], new["draw_seed"])
    out = []
    for t in ("passkey", "multikey"):
        for m in old["multiples"]:
            n = sum(1 for r in old["rows"] if r["task"] == t and r["multiple"] == m)
            f0, f1 = cell_sum(old["rows"], t, m, "focused"), cell_sum(new["rows"], t, m, "focused")
            s0, s1 = cell_sum(old["rows"], t, m, "salience"), cell_sum(new["rows"], t, m, "salience")
            r0, r1 = cell_sum(old["rows"], t, m, "random"), cell_sum(new["rows"], t, m, "random")
            o = cell_sum(old["rows"], t, m, "oracle")
            buckets = []
            for d in old["depths"]:
                fo = sum(r["score"]["focused"] for r in new["rows"] if r["task"] == t and r["multiple"] == m and r["depth"] == d)
                oo = sum(r["score"]["oracle"] for r in old["rows"] if r["task"] == t and r["multiple"] == m and r["depth"] == d)
                buckets.append(f"{fo:g}/{oo:g}")
            out.append(f"| {label} | {t} {m}x | {f0:g} -> **{f1:g}** | {s0:g} -> {s1:g} | {r0:g} -> {r1:g} | {o:g} | {' '.join(buckets)} | {n} |")
    return out
if __name__ == "__main__":
    print("| seed | cell | focused old -> new | salience old -> new | random old -> new | oracle | new focused / oracle per depth 0.1 0.5 0.9 | docs |")
    print("|---|---|---|---|---|---|---|---|")
    args = sys.argv[1:]
    for i in range(0, len(args), 3):
        print("\n".join(run(args[i], args[i + 1], args[i + 2])))
