"""Tokens/s per arm and the per-round ratios of run.sh's JSON files -> summary.json and a Markdown table on stdout."""
import glob
import json
import statistics
import sys

out = sys.argv[1]
arms = ("cache", "nocache", "compiled_cache", "compiled_nocache")
tps = {a: [json.load(open(p))["decode_tokens_per_s"] for p in sorted(glob.glob(f"{out}/{a}-*.json"),
                                                                    key=lambda p: int(p.rsplit("-", 1)[1][:-5]))]
       for a in arms}
same = all(json.load(open(p))["tokens"] == json.load(open(p.replace("compiled_cache", "nocache")))["tokens"]
           for p in glob.glob(f"{out}/compiled_cache-*.json"))
pairs = {"eager: cache / no cache": ("cache", "nocache"),
         "compiled: cache / no cache": ("compiled_cache", "compiled_nocache")}
ratios = {k: [x / y for x, y in zip(tps[a], tps[b])] for k, (a, b) in pairs.items()}
summary = {"tokens_per_s": tps, "ratios": ratios, "median_ratio": {k: statistics.median(v) for k, v in ratios.items()},
           "greedy_tokens_equal": same}
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)
print("| arm | tokens/s per round | median |\n|---|---|---|")
for a in arms:
    print(f"| {a} | {', '.join(f'{x:.0f}' for x in tps[a])} | {statistics.median(tps[a]):.0f} |")
print("\n| ratio | per round | median | rounds >= 3 |\n|---|---|---|---|")
for k, v in ratios.items():
    print(f"| {k} | {', '.join(f'{x:.2f}' for x in v)} | **{statistics.median(v):.2f}** | {sum(x >= 3 for x in v)} of {len(v)} |")
print(f"\nGreedy tokens of the compiled cached runs equal the eager no-cache runs': {same}")
