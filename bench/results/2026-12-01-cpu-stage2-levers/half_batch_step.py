"""Median whole stage-2 micro-step (StepBench.step) of a preset at a given batch size, in this process's threads.
Two of these at half the batch, one thread each and side by side, stand for two DDP ranks without the all-reduce.

    OMP_NUM_THREADS=2 .venv/bin/python half_batch_step.py long_corpus 8 8
    for i in 1 2; do OMP_NUM_THREADS=1 .venv/bin/python half_batch_step.py long_corpus 4 8 & done; wait
"""
import sys, time, statistics, torch
from mc.config_loading import load_config
from mc.app.step_profile import StepBench
preset, bs = sys.argv[1], int(sys.argv[2])
b = StepBench(load_config([f"preset={preset}", f"train.stage2.batch_size={bs}"]))
for _ in range(3): b.step()
ts = [b.step() for _ in range(int(sys.argv[3]) if len(sys.argv) > 3 else 10)]
print(f"{preset} batch {bs} threads {torch.get_num_threads()}: median {statistics.median(ts)*1e3:.1f} ms")
