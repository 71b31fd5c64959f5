"""GistNet and LensNet under torch.compile(fullgraph=True, dynamic=False): 0 graph breaks,
parity with eager (no_grad and with backward), no recompiles across repeated same-shape calls.

Every compile runs in a SUBPROCESS (the ``WORKER`` script below, one per net, started in
parallel by a module fixture) so Dynamo's process-global state (counters, caches, stance) never
leaks into other tests. Each worker prints one JSON line that the tests check.

The worker can also be run by hand, e.g. on a GPU machine:
    python tests/test_nets_compile.py '{"net": "lens", "mode": "reduce-overhead", "device": "cuda"}'
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from _subproc import collect, start  # shared fresh-interpreter runner (tests/_subproc.py)

WORKER = r'''
import json, sys, time
import torch
from torch._dynamo.utils import counters

spec = json.loads(sys.argv[1])
net_name = spec["net"]
mode = spec.get("mode", "default")
device = torch.device(spec.get("device", "cpu"))
pooling = spec.get("pooling", "mean_mlp")
iters = int(spec.get("iters", 3))
use_cg = device.type == "cuda" and mode == "reduce-overhead"

from mc.config import GistNetConfig, LensNetConfig
from mc.nets.gistnet import GistNet
from mc.nets.lensnet import LensNet

D, K, MAX_LOD, N, B, W = 32, 4, 2, 6, 2, 16
torch.manual_seed(0)


def make_inputs(seed):
    g = torch.Generator().manual_seed(seed)
    if net_name == "gist":
        return (torch.randn(N, K, D, generator=g).to(device),)
    embeds = torch.randn(B, W, D, generator=g)
    lengths = torch.tensor([W - 3, 5])
    idx = torch.arange(W)
    mask = idx[None, :] < lengths[:, None]
    lods = torch.where(idx[None, :] < 2, 2, torch.where(idx[None, :] < 4, 1, 0)).expand(B, W).clone()
    widths = (K ** lods).float() * mask
    starts = torch.cumsum(widths, dim=1) - widths
    positions = (starts + (widths - 1) / 2) * mask
    lods = lods * mask
    num_tokens = widths.sum(dim=1)
    out = [embeds, mask, positions, lods, num_tokens]
    if spec.get("token_index"):  # the token index's match, an input that carries gradient in training
        out.append(torch.randn(B, W, generator=g) * mask)
    out = [t.to(device) for t in out]
    if spec.get("token_index") and net.training and torch.is_grad_enabled():
        out[-1].requires_grad_(True)
    return tuple(out)


if net_name == "gist":
    net = GistNet(GistNetConfig(d_model=32, n_layers=2, n_heads=4, pooling=pooling), D, K)
    with torch.no_grad():  # make the learned path matter (it is exactly zero at init)
        net.out_proj.weight.normal_(0.0, 0.1)
else:
    net = LensNet(LensNetConfig(d_model=32, n_layers=2, n_heads=4, query_match=bool(spec.get("query_match")),
                                token_index=int(spec.get("token_index", 0))), D, K, MAX_LOD)
net = net.to(device)
compiled = torch.compile(net, fullgraph=True, dynamic=False, mode=mode)


def mark():
    if use_cg:
        torch.compiler.cudagraph_mark_step_begin()


def excess(got, ref, tol=1e-4):
    # allclose-style (rtol = atol = tol): > 0 means some element is outside the tolerance
    return ((got - ref).abs() - tol * (1.0 + ref.abs())).max().item()


def frames():
    return counters["stats"]["unique_graphs"]


result = {"fwd_err": 0.0, "grad_err": 0.0, "fwd_excess": -1.0, "grad_excess": -1.0, "call_s": []}
t0 = time.perf_counter()

# ---- inference: eval mode, no_grad ---------------------------------------------------------
net.eval()
with torch.no_grad():
    for i in range(iters):
        args = make_inputs(100 + i)
        mark()
        t = time.perf_counter()
        out = compiled(*args).clone()  # clone at once: a later replay may overwrite it
        result["call_s"].append(round(time.perf_counter() - t, 3))
        ref = net(*args)
        result["fwd_err"] = max(result["fwd_err"], (out - ref).abs().max().item())
        result["fwd_excess"] = max(result["fwd_excess"], excess(out, ref))
result["frames_after_inference"] = frames()

# ---- training: train mode, forward + backward ----------------------------------------------
net.train()
# the token index runs outside the net's forward (its match is an input): its parameters get no gradient here
params = [p for n, p in net.named_parameters() if p.requires_grad and not n.startswith("index.")]
for i in range(iters):
    args = make_inputs(200 + i)
    out_shape = (N, D) if net_name == "gist" else (B, W)
    weight = torch.randn(out_shape, generator=torch.Generator().manual_seed(i)).to(device)
    for p in params:
        p.grad = None
    mark()
    t = time.perf_counter()
    out = compiled(*args)
    (out * weight).sum().backward()
    result["call_s"].append(round(time.perf_counter() - t, 3))
    out_c = out.detach().clone()
    grads_c = [p.grad.detach().clone() for p in params]
    for p in params:
        p.grad = None
    ref = net(*args)
    (ref * weight).sum().backward()
    result["fwd_err"] = max(result["fwd_err"], (out_c - ref.detach()).abs().max().item())
    result["fwd_excess"] = max(result["fwd_excess"], excess(out_c, ref.detach()))
    for gc, p in zip(grads_c, params):
        result["grad_err"] = max(result["grad_err"], (gc - p.grad).abs().max().item())
        result["grad_excess"] = max(result["grad_excess"], excess(gc, p.grad))
result["frames_after_train"] = frames()

# ---- frozen: same shapes again must not compile anything ---------------------------------
recompile_error = None
try:
    with torch.compiler.set_stance("fail_on_recompile"):
        net.eval()
        with torch.no_grad():
            for i in range(2):
                mark()
                compiled(*make_inputs(300 + i)).clone()
        net.train()
        for i in range(2):
            mark()
            compiled(*make_inputs(400 + i)).sum().backward()
except Exception as exc:  # reported, and the test fails on it
    recompile_error = f"{type(exc).__name__}: {exc}"[:2000]
result["recompile_error"] = recompile_error
result["frames_final"] = frames()
result["graph_breaks"] = sum(counters["graph_break"].values())
result["graph_break_reasons"] = list(counters["graph_break"])[:5]
result["cudagraph_skips"] = counters["inductor"].get("cudagraph_skips", 0)
result["total_s"] = round(time.perf_counter() - t0, 2)
result["torch"] = torch.__version__
result["device"] = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
print("RESULT " + json.dumps(result))
'''

SPECS = {
    "gist_mean_mlp": {"net": "gist", "pooling": "mean_mlp"},
    "lens": {"net": "lens"},
    "lens_query_match": {"net": "lens", "query_match": True},
    "lens_token_index": {"net": "lens", "token_index": 8},
}


def _start(spec: dict) -> subprocess.Popen:
    return start(["-c", WORKER, json.dumps(spec)])


def _collect(proc: subprocess.Popen, timeout: float) -> dict:
    return collect(proc, timeout, mark="RESULT ")


@pytest.fixture(scope="module")
def results() -> dict[str, dict]:
    """Run every worker in parallel (2 CPU cores: the two cold compiles overlap)."""
    t0 = time.perf_counter()
    procs = {name: _start(spec) for name, spec in SPECS.items()}
    out = {name: _collect(proc, timeout=600) for name, proc in procs.items()}  # generous: shared machines
    out["_wall_s"] = round(time.perf_counter() - t0, 1)
    return out


@pytest.mark.parametrize("name", list(SPECS))
def test_zero_graph_breaks(results, name):
    r = results[name]
    assert r["graph_breaks"] == 0, r["graph_break_reasons"]


@pytest.mark.parametrize("name", list(SPECS))
def test_parity_with_eager(results, name):
    r = results[name]
    # allclose(rtol=1e-4, atol=1e-4) on every output and every parameter gradient
    assert r["fwd_excess"] <= 0, r
    assert r["grad_excess"] <= 0, r


@pytest.mark.parametrize("name", list(SPECS))
def test_no_recompiles_for_repeated_shapes(results, name):
    r = results[name]
    # One graph for (eval, no_grad) and one for (train, grad): the two global modes are guards.
    assert r["frames_after_inference"] == 1, r
    assert r["frames_after_train"] == 2, r
    assert r["recompile_error"] is None, r["recompile_error"]
    assert r["frames_final"] == 2, r


if __name__ == "__main__":  # run one worker by hand and print its JSON
    spec = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {"net": "lens"}
    print(json.dumps(_collect(_start(spec), timeout=600), indent=1))
