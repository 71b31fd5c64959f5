"""One process, round-robin: a preset's whole stage-2 micro-step (StepBench.step: plan, run_step, backward, clip,
AdamW) eager against the same with the overrides given (e.g. the nets' training graphs compiled), after warm-up.

    OMP_NUM_THREADS=2 .venv/bin/python compile_step.py long compile.gistnet.train=default compile.lensnet.train=default
"""
import sys, time, statistics, torch
from mc.config_loading import load_config
from mc.app.step_profile import StepBench
preset = sys.argv[1]; extra = sys.argv[2:]
eb = StepBench(load_config([f"preset={preset}"]))
t = time.perf_counter()
cb = StepBench(load_config([f"preset={preset}", *extra]))
cb.ctrl.warmup()
print("build+warmup s", time.perf_counter() - t, flush=True)
for _ in range(2): eb.step(); cb.step()
e, c = [], []
for _ in range(8):
    e.append(eb.step()); c.append(cb.step())
me, mcm = statistics.median(e), statistics.median(c)
print(f"{preset} {extra}: eager {me*1e3:.1f} ms compiled {mcm*1e3:.1f} ms ratio {me/mcm:.3f}")
