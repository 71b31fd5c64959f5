"""Pair the task suite's reads at branch_tail_tokens 8 (the preset) and 24, per document.

    python compare.py passkey-s0-t8.json passkey-s0-t24.json [more pairs ...]
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository root
from mc.eval.stats import paired_diff_ci  # noqa: E402

args = sys.argv[1:]
for a_path, b_path in zip(args[::2], args[1::2]):
    a, b = json.load(open(a_path)), json.load(open(b_path))
    assert a["draw_seed"] == b["draw_seed"] and len(a["rows"]) == len(b["rows"])
    print(f"== {a_path} (tail {a['refocus']['branch_tail_tokens']}) -> {b_path} (tail {b['refocus']['branch_tail_tokens']})")
    for v in a["variants"]:
        for mult in a["multiples"]:
            ra = [r for r in a["rows"] if r["multiple"] == mult]
            rb = [r for r in b["rows"] if r["multiple"] == mult]
            assert [r["answers"] for r in ra] == [r["answers"] for r in rb]  # the same documents
            xa, xb = [r["score"][v] for r in ra], [r["score"][v] for r in rb]
            ci = paired_diff_ci(xb, xa)
            print(f"  {v:9s} {mult:2d}x: {sum(xa):4.0f} -> {sum(xb):4.0f} of {len(xa)}, "
                  f"{ci['mean']:+.3f} [{ci['lo']:+.3f}, {ci['hi']:+.3f}]")
