"""The 12 costliest ops (self CPU time) of one profiled stage-2 micro-step of a trained long_corpus run, with
flush-to-zero for subnormal floats off or on (set before the thread pool starts).

    OMP_NUM_THREADS=2 .venv/bin/python ops.py off|on RUN_DIR
"""
import os
import sys

mode, run = sys.argv[1], sys.argv[2]
os.environ["MC_FLUSH_DENORMAL"] = "1" if mode == "on" else "0"

from torch.profiler import profile  # noqa: E402
from trained_bench import trained_bench  # noqa: E402

b, _ = trained_bench(run)
with profile() as p:
    b.step()
for e in sorted(p.key_averages(), key=lambda e: -e.self_cpu_time_total)[:12]:
    print(f"{mode} {e.key[:50]:50s} {e.self_cpu_time_total / 1e3:8.1f} ms {e.count}")
