"""Multi-key task-suite JSONs: documents read per variant, and `focused` - `salience` paired per document."""
import json
import sys

from mc.eval.stats import paired_diff_ci

for path in sys.argv[1:]:
    rows = [r for r in json.load(open(path))["rows"] if r["task"] == "multikey"]
    read = {v: int(sum(r["score"][v] for r in rows)) for v in rows[0]["score"]}
    ci = paired_diff_ci([r["score"]["focused"] for r in rows], [r["score"]["salience"] for r in rows])
    print(f"{path}: " + ", ".join(f"{v} {n}" for v, n in read.items()) + f" of {len(rows)}; "
          + "focused - salience {mean:+.3f} [{lo:+.3f}, {hi:+.3f}]".format(**ci))
