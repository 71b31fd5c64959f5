"""The 12 costliest ops (self CPU time) of one profiled stage-2 micro-step of a trained long_corpus run, with
flush-to-zero for subnormal floats off or on (set before the thread pool starts).

    OMP_NUM_THREADS=2 .venv/bin/python ops.py off|on RUN_DIR
"""
import os
import sys

mode, run = sys.argv[1], sys.argv[2]
os.environ["MC_FLUSH_DENORMAL"] = "1" if mode == "on" else "0"

from torch.profiler import profile  # noqa: E402
from mc.app.step_profile import StepBench  # noqa: E402
from mc.build import load_base_weights  # noqa: E402
from mc.config_loading import load_config  # noqa: E402
from mc.train.checkpoint import load_checkpoint  # noqa: E402

st = load_checkpoint(f"{run}/stage2/ckpt.pt")
b = StepBench(load_config(["preset=long_corpus"]))
load_base_weights(b.ctrl.base, f"{run}/stage1/base.pt")
b.ctrl.load_state_dict(st["controller"])
b.opt.load_state_dict(st["optimizer"])
for _ in range(2):
    b.step()
with profile() as p:
    b.step()
for e in sorted(p.key_averages(), key=lambda e: -e.self_cpu_time_total)[:12]:
    print(f"{mode} {e.key[:50]:50s} {e.self_cpu_time_total / 1e3:8.1f} ms {e.count}")
