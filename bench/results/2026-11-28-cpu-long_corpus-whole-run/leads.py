"""A record of how the locator tables were made (not a tool): python leads.py NAME=ablation.json ...
Each file is mc_ablate.py --salience output with arms 'all rules' and 'one zoom' (locator.sh, validation.sh). Prints
per seed and task family (16x-... pooled; the task and its held-out template apart): correct of n for LensNet
(focused), salience and the oracle under all rules, LensNet and salience under one zoom, LensNet's lead over salience
under each search, and what one zoom costs LensNet (paired, 95% normal interval)."""
import json, sys


def ci(x):
    return f"{x['mean']:+.3f} [{x['lo']:+.3f}, {x['hi']:+.3f}]"


print("| seed (draw) | task | LensNet / salience / oracle, all rules | LensNet / salience, one zoom "
      "| lead, all rules | lead, one zoom | one zoom - all rules, LensNet |")
print("|---|---|---|---|---|---|---|")
for arg in sys.argv[1:]:
    name, path = arg.split("=", 1)
    r = json.load(open(path))
    for task in r["tasks"]:
        def got(arm, v):
            cs = [c for c in r["cells"] if (c["arm"], c["task"], c["variant"]) == (arm, task, v)]
            return f"{round(sum(c['accuracy'] * c['n'] for c in cs))}"
        n = sum(c["n"] for c in r["cells"] if (c["arm"], c["task"], c["variant"]) == ("all rules", task, "focused"))
        lead = {x["arm"]: x for x in r["leads"] if x["task"] == task}
        cost = next(d for d in r["diffs"] if (d["arm"], d["task"], d["variant"]) == ("one zoom", task, "focused"))
        print(f"| {name} ({r['draw_seed']}) | {task} | {got('all rules', 'focused')} / {got('all rules', 'salience')} / "
              f"{got('all rules', 'oracle')} of {n} | {got('one zoom', 'focused')} / {got('one zoom', 'salience')} | "
              f"{ci(lead['all rules'])} | {ci(lead['one zoom'])} | {ci(cost)} |")
