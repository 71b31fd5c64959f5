"""A record of how the ablation table was made (not a tool): python ablation_table.py s0_all.json s1_all.json ...
Per arm, focused minus all rules per task (mean [95% CI], from each ablation.json's paired diffs), one column per
file, and the mean over the four tasks of each file."""
import json, sys
files = [json.load(open(p)) for p in sys.argv[1:]]
arms = [a for a in files[0]["arms"] if a != "all rules"]
for f in files[1:]:
    arms += [a for a in f["arms"] if a != "all rules" and a not in arms]
tasks = files[0]["tasks"]
print("| arm | " + " | ".join(f"{t} ({p.split('/')[-1]})" for p in sys.argv[1:] for t in tasks) + " |")
print("|---" * (1 + len(tasks) * len(files)) + "|")
for a in arms:
    cells = []
    for f in files:
        d = {x["task"]: x for x in f["diffs"] if x["arm"] == a}
        cells += [f"{d[t]['mean']:+.3f} [{d[t]['lo']:+.3f}, {d[t]['hi']:+.3f}]" if t in d else "-" for t in tasks]
    print(f"| {a} | " + " | ".join(cells) + " |")
