"""How the tables of README.md were counted (a record, not a tool): python ratios.py sweeps.json seed4
Per task x length (depths pooled): focused, oracle, focused / oracle, salience, (focused - salience) / n, recency,
compressed; then the 4x depth-0.9 cells (the no-harm check)."""
import collections, json, sys
run = json.load(open(sys.argv[1]))[sys.argv[2]]
vs = run["variants"]
c, n, harm = collections.defaultdict(collections.Counter), collections.Counter(), collections.defaultdict(collections.Counter)
for task, length, depth, _doc, exact, _branch, _lod in run["rows"]:
    n[task, length] += 1
    for v, bit in zip(vs, exact):
        c[task, length][v] += bit == "1"
        if length == 512 and depth == 0.9:
            harm[task][v] += bit == "1"
print("draw", run["draw_seed"])
for k in sorted(c):
    f, o, s = c[k]["focused"], c[k]["oracle"], c[k]["salience"]
    print(f"{k[0]:24s} {k[1]:5d} n={n[k]:3d} focused {f:3d} oracle {o:3d} ratio {f / max(o, 1):.2f} salience {s:3d} "
          f"f-s {(f - s) / n[k]:+.2f} recency {c[k]['recency']} compressed {c[k]['compressed']}")
for task in sorted(harm):
    print("4x depth 0.9", task, dict(harm[task]))
