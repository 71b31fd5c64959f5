"""The stage-2 micro-step of a trained long_corpus run (its stage-2 checkpoint's nets and optimizer state), timed with
flush-to-zero for subnormal floats off, set before torch's thread pool starts ("early", what `import mc` does now), or
set after the pool ran a step ("late": the calling thread only). Median of 5 steps after 2.

    OMP_NUM_THREADS=2 .venv/bin/python when_set.py off|early|late RUN_DIR
"""
import os
import statistics
import sys

mode, run = sys.argv[1], sys.argv[2]
os.environ["MC_FLUSH_DENORMAL"] = "1" if mode == "early" else "0"  # read once, at `import mc`

import torch  # noqa: E402
from trained_bench import trained_bench  # noqa: E402

b, step = trained_bench(run)
if mode == "late":
    torch.set_flush_denormal(True)
ts = [b.step() for _ in range(5)]
print(mode, "step", step, "threads", torch.get_num_threads(), "median ms", round(statistics.median(ts) * 1e3, 1))
