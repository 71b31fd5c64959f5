import json, collections, sys
for f in sys.argv[1:]:
    d = json.load(open(f))
    c = collections.Counter(); tot=collections.Counter(); plans=collections.Counter()
    for r in d["rows"]:
        sc = r["score"]["oracle"]
        key=(r["multiple"], r["depth"])
        c[key] += sc; tot[key] += 1; plans[r.get("oracle_plan")] += 1
        if r.get("oracle_plan") == "graded": print("  graded won:", f, key, r["doc"], sc)
    print(f, dict(plans), {k: f"{c[k]:g}/{tot[k]}" for k in sorted(c)})
