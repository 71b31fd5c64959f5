"""Recompile hygiene (issue 4 item 5): the three classic recompile causes, reproduced in tiny
modules, are each reported by the CompileMonitor WITH guard text naming the culprit; and the
project's own instrumentation (CompiledNet + counters + telemetry toggled on/off) causes zero
recompiles over 50 steps.

Every scenario runs in a fresh subprocess: Dynamo's caches, counters and callbacks are global.
"""
from __future__ import annotations



from _subproc import MARK, run_script  # shared fresh-interpreter runner (tests/_subproc.py)


# Shared prologue: a monitor started before compiling; ``report()`` prints the steady-state split.
PROLOGUE = f"""
import json, torch
from torch import nn
from mc.compile import CompileMonitor
torch.manual_seed(0)
mon = CompileMonitor().start()
def report(**extra):
    s = mon.snapshot()
    print({MARK!r} + json.dumps({{"warmup": s["warmup"], "steady": s["steady"], "notes": s["notes"], **extra}}))
"""


def test_hook_reading_mutable_flag_is_reported():
    out = run_script(PROLOGUE + """
class Flag:
    def __init__(self):
        self.verbose = False
def make_hook(flag):
    def hook(mod, inp, out):
        if flag.verbose:          # the closure reads a mutable flag: Dynamo guards on its value
            return out * 2
        return out
    return hook
m = nn.Linear(4, 4)
flag = Flag()
m.register_forward_hook(make_hook(flag))
f = torch.compile(m, backend="eager", fullgraph=True, dynamic=False)
x = torch.randn(2, 4)
for _ in range(3):
    f(x)
mon.freeze_point()
flag.verbose = True
f(x); f(x)
report()
""")
    steady = out["steady"]
    assert out["warmup"]["compiles"] == 1 and out["warmup"]["recompiles"] == 0
    assert steady["compiles"] == 1 and steady["recompiles"] == 1, steady
    reason = steady["recompile_reasons"][0]
    assert "verbose" in reason and "cell_contents" in reason and "_forward_hooks" in reason, reason


def test_hook_closing_over_filling_dict_is_reported():
    out = run_script(PROLOGUE + """
def make_hook(store):
    def hook(mod, inp, out):
        store[f"call{len(store)}"] = out.detach()   # a metrics sink that grows every call
    return hook
m = nn.Linear(4, 4)
store = {}
m.register_forward_hook(make_hook(store))
f = torch.compile(m, backend="eager", fullgraph=True, dynamic=False)
x = torch.randn(2, 4)
f(x)
mon.freeze_point()
for _ in range(3):
    f(x)
report(store_len=len(store))
""")
    steady = out["steady"]
    assert out["store_len"] == 4
    assert steady["recompiles"] == 3, steady  # every call recompiles: the dict's length is a guard
    for reason in steady["recompile_reasons"]:
        assert "cell_contents" in reason and "store" in reason, reason
    assert any("len(" in r for r in steady["recompile_reasons"])


def test_lazily_grown_buffer_is_reported():
    out = run_script(PROLOGUE + """
class Lazy(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("scratch", torch.zeros(0, 4))   # materialised on first use: bad
    def forward(self, x):
        if self.scratch.shape[0] < x.shape[0]:
            self.scratch = x.new_zeros(2 * x.shape[0], x.shape[1])
        self.scratch[: x.shape[0]].copy_(x)
        return self.lin(self.scratch[: x.shape[0]])
f = torch.compile(Lazy(), backend="eager", fullgraph=True, dynamic=False)
x = torch.randn(2, 4)
f(x)
mon.freeze_point()
f(x); f(x)
report()
""")
    steady = out["steady"]
    assert steady["recompiles"] == 1, steady
    reason = steady["recompile_reasons"][0]
    assert "_buffers['scratch']" in reason and "mismatch" in reason, reason


def test_own_instrumentation_causes_zero_recompiles():
    """CompiledNet + counters + JSONL/debug telemetry toggled on and off every step: 0 recompiles
    over 50 steady steps (inductor, train forward+backward and no_grad inference), freeze=fail."""
    out = run_script(f"""
import json, tempfile, os, torch
from torch import nn
from mc.config import NetCompileConfig
from mc.compile import CompiledNet, StepMarker, Telemetry, freeze, apply_recompile_limit, recompile_limit_for
torch.manual_seed(0)
lines = []
tmp = tempfile.mkdtemp()
tel = Telemetry(jsonl_path=os.path.join(tmp, "t.jsonl"), debug=True, log=lines.append).start()
apply_recompile_limit(recompile_limit_for(1, 2))
m = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 1))
net = CompiledNet(m, "lensnet", NetCompileConfig(train="default", inference="default"), telemetry=tel)
marker = StepMarker([net])
x = torch.randn(4, 8)
def train_step():
    y = net(x, context="train")
    y.square().mean().backward()
    marker.mark("after backward")
def infer_step():
    with torch.no_grad():
        net(x, context="inference")
    marker.mark("allocator iteration")
for _ in range(3):
    train_step(); infer_step(); tel.end_step()
freeze("fail", tel.monitor)
for i in range(50):
    tel.enabled = (i % 2 == 0)     # metrics toggled on and off
    tel.debug = (i % 3 == 0)
    train_step(); infer_step(); tel.end_step(step_kind="steady")
tel.close()
s = tel.snapshot()
parsed = [json.loads(l) for l in open(os.path.join(tmp, "t.jsonl"))]
print({MARK!r} + json.dumps({{"warmup": s["compile"]["warmup"], "steady": s["compile"]["steady"],
      "totals": s["calls"]["totals"]["lensnet"], "clones": s["calls"]["clones"]["lensnet"],
      "marks": s["calls"]["mark_requests"], "cudagraph": s["cudagraph"], "debug_lines": len(lines),
      "jsonl_kinds": sorted({{p["kind"] for p in parsed}}), "reentrance": s["calls"]["reentrance"]}}))
""", timeout=400)
    warm, steady = out["warmup"], out["steady"]
    # no_grad inference is a second cache entry; LAZY_BACKWARD fires only on a cold AOTAutograd
    # cache (a warm TORCHINDUCTOR_CACHE_DIR loads the backward without a compile event)
    assert warm["compiles"] == 2 and warm["recompiles"] == 1, warm
    assert "grad_mode" in warm["recompile_reasons"][0], warm["recompile_reasons"]
    assert steady["compiles"] == 0 and steady["lazy_backward_compiles"] == 0, steady
    assert steady["recompiles"] == 0 and steady["recompile_reasons"] == [], steady
    assert steady["graph_breaks"] == 0 and steady["unique_graphs"] == 0
    # counting was on for the 3 warm-up steps and the 25 even steady steps
    assert out["totals"]["train"]["calls"] == 28 and out["totals"]["inference"]["calls"] == 28
    assert out["clones"] == {"train": 28, "inference": 28}
    assert out["marks"] == {"after backward": 28, "allocator iteration": 28}
    assert out["cudagraph"] == "n/a (cpu)"
    assert out["debug_lines"] == 3 + 17  # debug on for warm-up and every third steady step
    assert {"start", "compile", "step"} <= set(out["jsonl_kinds"])
    assert out["reentrance"] == []
