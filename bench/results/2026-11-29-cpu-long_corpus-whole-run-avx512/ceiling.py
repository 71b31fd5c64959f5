"""How far LensNet could lead the salience rule under the preset's search (issue #39's bar: focused - salience >= 0.15
on multi-needle at 16x and 32x). Not a tool: python ceiling.py SWEEPS_JSON[:NAME,...] ... (compact sweeps, ../2026-11-28-cpu-long_corpus-locator/compact.py)
For each sweep of the preset's nets, multi-needle documents at 16x and 32x (the held-out template pooled in, as the
records' tables pool it): the measured lead (focused - salience, paired), the lead a locator would have if it read
every document the oracle reads (oracle and not salience, minus focused-only wins lost: oracle - salience paired),
and the lead of a locator that read every document (1 - salience)."""
import json
import sys


def sweeps(arg):
    path, _, names = arg.partition(":")
    d = json.load(open(path))
    return [(k, d[k]) for k in (names.split(",") if names else d) if isinstance(d.get(k), dict)]


print("| sweep | draw | length | documents | salience | oracle | focused | focused - salience | oracle - salience | 1 - salience |")
print("|---|---|---|---|---|---|---|---|---|---|")
for arg in sys.argv[1:]:
    for name, s in sweeps(arg):
        vs = s["variants"]
        fi, si, oi = vs.index("focused"), vs.index("salience"), vs.index("oracle")
        for mult in (16, 32):
            sel = [r[4] for r in s["rows"] if r[0].startswith("multi_needle") and r[1] // 128 == mult]
            if not sel:
                continue
            n = len(sel)
            f, sa, o = (sum(int(e[i]) for e in sel) / n for i in (fi, si, oi))
            print(f"| {name} | {s['draw_seed']} | {mult}x | {n} | {sa:.3f} | {o:.3f} | {f:.3f} | {f - sa:+.3f} | "
                  f"{o - sa:+.3f} | {1 - sa:.3f} |")
