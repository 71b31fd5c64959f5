"""Collect the five default-preset runs (seeds 3-7) into the record's JSON."""
import json, re, sys
runs = []
for s in (3, 4, 5, 6, 7):
    d = f"/tmp/s8/runs/def_s{s}"
    log = open(f"/tmp/s8/def_s{s}.log").read()
    stages = {m[0]: float(m[1]) for m in re.findall(r"\[run10\] (\w+): done in ([\d.]+) s", log)}
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", log)[1]
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", log)[1]) // 1024
    e = json.load(open(f"{d}/eval/eval.json"))
    acc = e["metrics"]["recall_accuracy"]
    s1 = json.load(open(f"{d}/stage1/summary.json"))
    runs.append({"seed": s, "wall": wall, "stages_s": stages, "peak_rss_mb": rss,
                 "exact_recall_pct": {v: round(100 * acc[v]["mean"], 1) for v in acc},
                 "focused_over_full": round(acc["focused"]["mean"] / acc["full"]["mean"], 3),
                 "recall_documents": acc["full"]["n"], "eval_draw_seed": e["settings"].get("draw_seed") if isinstance(e.get("settings"), dict) else None,
                 "copy_gate_step": s1["copy_gate"]["step"], "stage1_val_query_loss": round(s1["val_query_loss"], 4)})
json.dump({"preset": "cpu (default)", "commit": sys.argv[1], "machine": "2-vCPU AMD EPYC VM, torch 2.13.0+cpu",
           "date": "2026-11-28", "command": "python -m mc.app.workflow --name def_sS train.seed=S (what bash run10.sh train.seed=S runs)",
           "runs": runs}, open(sys.argv[2], "w"), indent=1)
for r in runs:
    a = r["exact_recall_pct"]
    print(f"| {r['seed']} | {r['wall']} | {r['stages_s']['stage1']:.0f} s | {r['stages_s']['stage2']:.0f} s | step {r['copy_gate_step']} | "
          f"{a['full']}% | {a['focused']}% | {r['focused_over_full']:.3f} | {a['compressed']}% | {a['random']}% | {r['eval_draw_seed']} | {r['peak_rss_mb']} MB |")
