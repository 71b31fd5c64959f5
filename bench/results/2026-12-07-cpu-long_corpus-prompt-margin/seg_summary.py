import json, sys
docs = json.load(open(sys.argv[1]))
for kind, sel in (("corpus", [d for d in docs if not d['name'].startswith('recall')]), ("recall", [d for d in docs if d['name'].startswith('recall')])):
    print(kind, len(sel), "documents")
    tot = []
    for s in range(8):
        diffs = [(sum(d['focused'][s*32:(s+1)*32]) - sum(d['compressed'][s*32:(s+1)*32])) / 32 for d in sel]
        m = sum(diffs)/len(diffs); sd = (sum((x-m)**2 for x in diffs)/(len(diffs)-1))**.5; se = sd/len(diffs)**.5
        ed = [d['edits']['focused'][s] for d in sel]
        print(f"  tokens {s*32:3d}-{s*32+31:3d}: focused - compressed {m:+.4f} [{m-1.96*se:+.4f}, {m+1.96*se:+.4f}]; "
              f"the refocus before them edited in {sum(e>0 for e in ed)} of {len(sel)}")
