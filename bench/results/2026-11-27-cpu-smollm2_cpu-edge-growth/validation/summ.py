import json, sys
def summ(path, variants=("focused", "salience"), tasks=("passkey", "multikey"), mults=None):
    r = json.load(open(path))
    out = []
    for m in (mults or r["multiples"]):
        for t in tasks:
            rows = [x for x in r["rows"] if x["task"] == t and x["multiple"] == m]
            if not rows: continue
            parts = []
            for v in variants:
                if v not in rows[0]["score"]: continue
                sc = sum(x["score"][v] for x in rows)
                if rows[0]["answer_lod"].get(v) is not None:
                    a = sum(x["answer_lod"][v] == 0 for x in rows); w = sum(x["needle_lod"][v] == 0 for x in rows)
                    parts.append(f"{v} {sc:g} (ans {a}, whole {w})")
                else:
                    parts.append(f"{v} {sc:g}")
            # per depth
            out.append(f"{m}x {t} /{len(rows)}: " + "; ".join(parts))
    print(path, r.get("seconds"), r.get("draw_seed")); print("\n".join(out))
if __name__ == "__main__":
    vs = sys.argv[2].split(",") if len(sys.argv) > 2 else ("focused", "salience")
    summ(sys.argv[1], vs)
