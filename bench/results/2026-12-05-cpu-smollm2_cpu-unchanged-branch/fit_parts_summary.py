"""Which layout each rule keeps, per document kind, from fit_parts_probe.py's JSON: R0 = the best total fit (the
search as it is, margin 0); guardE = a zoom is a candidate only when its teacher-forced fit is at most E nats below the
unchanged layout's. Then, per document, the best zoom's teacher-forced / lookahead gap to the unchanged layout.

    python fit_parts_summary.py fit-parts-lex-s0.json
"""
import json,sys
rows=json.load(open(sys.argv[1]))
def pick(parts, eps, use_guard):
    # candidates: first = LensNet zoom, middle = other zooms, last = unchanged; margin 0; ties keep earlier
    tot=[a+b for a,b in parts]; unch=parts[-1]
    best=None
    for i,(tf,ah) in enumerate(parts[:-1]):
        if use_guard and tf < unch[0]-eps: continue
        if best is None or tot[i]>tot[best]: best=i
    if best is None or tot[-1]>tot[best]: return len(parts)-1
    return best
kinds=list(dict.fromkeys(r['kind'] for r in rows))
for k in kinds:
    rs=[r for r in rows if r['kind']==k]
    line=f"{k:12s} n={len(rs):2d} unchanged kept: R0 {sum(pick(r['parts'],0,False)==len(r['parts'])-1 for r in rs):2d}"
    for eps in (0,1,2,4):
        line+=f" | guard{eps} {sum(pick(r['parts'],eps,True)==len(r['parts'])-1 for r in rs):2d}"
    print(line)
    print("   tf gap (best-total zoom - unch):", " ".join(f"{(r['parts'][max(range(len(r['parts'])-1),key=lambda i:sum(r['parts'][i]))][0]-r['parts'][-1][0]):+.1f}/{(r['parts'][max(range(len(r['parts'])-1),key=lambda i:sum(r['parts'][i]))][1]-r['parts'][-1][1]):+.1f}" for r in rs))
