"""Stage 2 of smollm2_cpu seed 0 stopped after 12 steps (of 380, so the same schedule and data as the full run):
its logged losses against a full run's first 12 lines."""
import json, sys
from pathlib import Path
from mc.config_loading import load_config
from mc.train.stage2 import train_stage2
out, ref = Path(sys.argv[1]), Path(sys.argv[2])
cfg = load_config(["preset=smollm2_cpu", "train.seed=0"])
train_stage2(cfg, out, progress=False, stop_after=12)
a = [json.loads(l) for l in open(out / "stage2" / "metrics.jsonl")]
b = [json.loads(l) for l in open(ref / "stage2" / "metrics.jsonl")]
for x, y in zip(a, b[:len(a)]):
    keys = ("lm_loss", "pref_loss", "gap")
    print(x["step"], y["step"], all(x[k] == y[k] for k in keys), [x[k] for k in keys], [y[k] for k in keys])
