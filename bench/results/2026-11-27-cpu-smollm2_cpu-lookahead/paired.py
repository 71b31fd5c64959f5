"""Paired task-suite files on one draw: OLD (previous search) vs NEW, oracle from REF (the run's full sweep).
Per task x multiple sums, paired per-document difference of focused with a 95% interval, and passkey / multikey
buckets where focused >= 0.8 of the oracle."""
import json, sys, math
def load(p): return json.load(open(p))
def key(r): return (r["task"], r["multiple"], r["depth"], r.get("index", r.get("doc")))
def rows_of(f, t, m): return [r for r in f["rows"] if r["task"] == t and r["multiple"] == m]
def diff_ci(a, b):
    d = [x - y for x, y in zip(a, b)]; n = len(d); mu = sum(d) / n
    sd = math.sqrt(sum((x - mu) ** 2 for x in d) / (n - 1)) if n > 1 else 0.0
    return mu, 1.96 * sd / math.sqrt(n)
def run(old_p, new_p, ref_p, label):
    old, new, ref = load(old_p), load(new_p), load(ref_p)
    assert old["draw_seed"] == new["draw_seed"] == ref["draw_seed"]
    out = []
    for t in ("passkey", "multikey"):
        for m in new["multiples"]:
            ro, rn, rr = rows_of(old, t, m), rows_of(new, t, m), rows_of(ref, t, m)
            assert [x["depth"] for x in ro] == [x["depth"] for x in rn] == [x["depth"] for x in rr]
            S = lambda rows, v: sum(r["score"][v] for r in rows)
            mu, h = diff_ci([r["score"]["focused"] for r in rn], [r["score"]["focused"] for r in ro])
            ms, hs = diff_ci([r["score"]["focused"] for r in rn], [r["score"]["salience"] for r in rn])
            buckets, met = [], 0
            for d in new["depths"]:
                fo = sum(r["score"]["focused"] for r in rn if r["depth"] == d)
                oo = sum(r["score"]["oracle"] for r in rr if r["depth"] == d)
                buckets.append(f"{fo:g}/{oo:g}"); met += oo > 0 and fo >= 0.8 * oo
            out.append(f"| {label} | {t} {m}x | {S(ro,'focused'):g} -> **{S(rn,'focused'):g}** | {mu:+.2f} [{mu-h:+.2f}, {mu+h:+.2f}] "
                       f"| {S(ro,'salience'):g} -> {S(rn,'salience'):g} | {ms:+.2f} [{ms-hs:+.2f}, {ms+hs:+.2f}] "
                       f"| {S(ro,'random'):g} -> {S(rn,'random'):g} | {S(rr,'oracle'):g} | {' '.join(buckets)} | {len(rn)} |")
    return out
if __name__ == "__main__":
    print("| seed | cell | focused old -> new | new - old (per doc, 95%) | salience old -> new | new focused - salience | random old -> new | oracle | new focused / oracle per depth 0.1 0.5 0.9 | docs |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    a = sys.argv[1:]
    for i in range(0, len(a), 4):
        print("\n".join(run(*a[i:i + 4])))
