"""The compiled boundary and its telemetry: counters, clone-once, re-entrance, step marks, freeze,
CUDA-graph status on CPU, Mega-Cache and the JSONL stream.

Tests that compile run in a fresh subprocess (Dynamo state is global); the rest use mode "off"
(eager) so they stay fast and leave the pytest process's Dynamo state untouched.
"""
from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from mc.compile import (CompiledNet, StepMarker, Telemetry, apply_recompile_limit, clone_outputs,
                        load_mega_cache, mega_cache_unavailable, recompile_limit_for, strict_cudagraphs)
from mc.config import NetCompileConfig

from _subproc import MARK, run_script  # shared fresh-interpreter runner (tests/_subproc.py)


class Scorer(nn.Module):
    """LensNet-shaped stand-in: [B, W, D] -> [B, W]."""

    def __init__(self, d: int = 4) -> None:
        super().__init__()
        self.lin = nn.Linear(d, 1)

    def forward(self, x):
        return torch.tanh(self.lin(x).squeeze(-1))


OFF = NetCompileConfig(train="off", inference="off")


def test_counters_count_calls_rows_entries_shapes_per_context():
    tel = Telemetry()
    net = CompiledNet(Scorer(), "lensnet", OFF, telemetry=tel)
    net(torch.randn(2, 8, 4), context="train")
    net(torch.randn(2, 8, 4), context="train")
    net(torch.randn(1, 16, 4), context="inference", entries=11)  # caller passes the real entry count
    step0 = tel.end_step()
    assert step0["calls"]["lensnet"]["train"] == {"calls": 2, "rows": 4, "entries": 32}
    assert step0["calls"]["lensnet"]["inference"] == {"calls": 1, "rows": 1, "entries": 11}
    net(torch.randn(3, 8, 4), context="train")
    snap = tel.snapshot()["calls"]
    assert snap["totals"]["lensnet"]["train"] == {"calls": 3, "rows": 7, "entries": 56}
    assert snap["current_step"]["lensnet"]["train"] == {"calls": 1, "rows": 3, "entries": 24}
    assert snap["shapes"]["lensnet"]["train"] == [[[2, 8, 4]], [[3, 8, 4]]]
    assert snap["shapes"]["lensnet"]["inference"] == [[[1, 16, 4]]]
    assert snap["totals"]["gistnet"]["train"]["calls"] == 0
    assert snap["step_index"] == 1
    tel.enabled = False
    net(torch.randn(2, 8, 4), context="train")
    assert tel.snapshot()["calls"]["totals"]["lensnet"]["train"]["calls"] == 3
    with pytest.raises(ValueError, match="context"):
        net(torch.randn(2, 8, 4), context="eval")
    with pytest.raises(ValueError, match="expected one of lensnet, gistnet"):
        CompiledNet(Scorer(), "scorer", OFF)


def test_clone_outputs_returns_new_tensor_once_and_counts():
    tel = Telemetry()
    net = CompiledNet(Scorer(), "gistnet", OFF, telemetry=tel)
    x = torch.randn(2, 8, 4)
    raw = net.run(x, context="inference")
    cloned = net.clone_outputs(raw, context="inference")
    assert cloned.data_ptr() != raw.data_ptr()
    torch.testing.assert_close(cloned, raw, rtol=0, atol=0)
    out = net(x, context="inference")  # __call__ = run + clone
    torch.testing.assert_close(out, raw, rtol=0, atol=0)
    a, b = clone_outputs((raw, raw * 2), telemetry=tel, net="gistnet", context="train")
    assert a.data_ptr() != raw.data_ptr() and torch.equal(b, raw * 2)
    clones = tel.snapshot()["calls"]["clones"]["gistnet"]
    assert clones == {"train": 2, "inference": 2}
    with pytest.raises(TypeError, match="tensor or a tuple"):
        clone_outputs({"a": raw})


def _loss_with_hook(net, x):
    """A loss whose backward calls the net from a tensor hook (the re-entrance pattern)."""
    w = torch.randn(2, 8, requires_grad=True)
    loss_in = w * 2

    def hook(grad):
        net(x, context="train")
        return grad

    loss_in.register_hook(hook)
    return loss_in.sum()


def test_reentrance_from_backward_hook_raises_with_clear_message():
    tel = Telemetry()
    net = CompiledNet(Scorer(), "lensnet", OFF, telemetry=tel)  # default policy "raise"
    x = torch.randn(2, 8, 4)
    with pytest.raises(RuntimeError, match=r"re-entrant call of lensnet \(train\): inside autograd backward"):
        _loss_with_hook(net, x).backward()
    events = tel.snapshot()["calls"]["reentrance"]
    assert len(events) == 1 and events[0]["action"] == "raised" and "backward" in events[0]["reason"]
    net(x, context="train")  # the in-flight tracker is clean after the error
    assert len(tel.snapshot()["calls"]["reentrance"]) == 1


@pytest.mark.parametrize("policy,action", [("eager", "ran eagerly"), ("record", "recorded only")])
def test_reentrance_policies_eager_and_record(policy, action):
    tel = Telemetry()
    net = CompiledNet(Scorer(), "lensnet", OFF, telemetry=tel, reentrance=policy)
    _loss_with_hook(net, torch.randn(2, 8, 4)).backward()
    events = tel.snapshot()["calls"]["reentrance"]
    assert [e["action"] for e in events] == [action]


def test_reentrance_while_another_call_in_flight():
    tel = Telemetry()
    inner = CompiledNet(Scorer(), "gistnet", OFF, telemetry=tel)

    class Outer(nn.Module):
        def forward(self, x):
            return inner(x, context="train")  # a net calling another boundary call

    outer = CompiledNet(Outer(), "lensnet", OFF, telemetry=tel)
    with pytest.raises(RuntimeError, match=r"another helper call in flight \(lensnet/train"):
        outer(torch.randn(2, 8, 4), context="train")
    assert tel.snapshot()["calls"]["reentrance"][0]["net"] == "gistnet"


def test_step_marker_counts_and_marks_only_when_cudagraphs_can_be_active(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: calls.append(1))
    tel = Telemetry()
    net = CompiledNet(Scorer(), "lensnet", OFF, telemetry=tel)
    marker = StepMarker([net])
    assert not marker.active  # eager on CPU: no CUDA graphs, so marking would only be a hazard
    assert marker.mark("after backward") is False
    assert marker.mark("allocator iteration") is False
    assert calls == []
    forced = StepMarker([net], active=True)
    assert forced.mark("allocator iteration") is True
    assert calls == [1]
    snap = tel.snapshot()["calls"]
    assert snap["mark_requests"] == {"after backward": 1, "allocator iteration": 2}
    assert snap["marks"] == 1
    assert tel.end_step()["marks"] == 3


def test_recompile_limit_sizing_and_apply():
    assert recompile_limit_for(3, 2, 2) == 8
    with pytest.raises(ValueError, match="n_buckets"):
        recompile_limit_for(0, 2)
    cfg = torch._dynamo.config
    old = apply_recompile_limit(20)
    try:
        assert cfg.recompile_limit == 20 and cfg.accumulated_recompile_limit >= 40
        assert cfg.fail_on_recompile_limit_hit is True
    finally:
        for k, v in old.items():
            setattr(cfg, k, v)


def test_strict_cudagraphs_sets_and_restores():
    import torch._inductor.config as icfg

    before = (icfg.triton.cudagraph_or_error, icfg.graph_partition)
    with strict_cudagraphs() as s:
        assert s.missing == []
        assert icfg.triton.cudagraph_or_error is True and icfg.graph_partition is False
    assert (icfg.triton.cudagraph_or_error, icfg.graph_partition) == before


def test_jsonl_stream_lines_parse_and_debug_line(tmp_path):
    lines = []
    path = tmp_path / "run" / "telemetry.jsonl"
    tel = Telemetry(jsonl_path=path, debug=True, log=lines.append).start()
    net = CompiledNet(Scorer(), "lensnet", OFF, telemetry=tel, reentrance="record")
    net(torch.randn(2, 8, 4), context="train")
    _loss_with_hook(net, torch.randn(2, 8, 4)).backward()
    tel.end_step(loss=1.5)
    tel.close()
    records = [json.loads(ln) for ln in path.read_text().splitlines()]
    kinds = [r["kind"] for r in records]
    assert kinds == ["start", "reentrance", "step"]
    assert records[-1]["loss"] == 1.5 and records[-1]["calls"]["lensnet"]["train"]["calls"] == 2
    assert len(lines) == 1 and lines[0].startswith("[mc step 0] lensnet/train c=2")
    assert "REENTRANCE x1" in lines[0] and "cudagraph=n/a (cpu)" in lines[0]
    json.dumps(tel.snapshot())  # the whole snapshot is JSON-serialisable


def test_mega_cache_missing_and_corrupt_files_give_clear_errors(tmp_path):
    why = mega_cache_unavailable()
    if why:
        pytest.skip(why)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_mega_cache(tmp_path / "nope.bin")
    (tmp_path / "empty.bin").write_bytes(b"")
    with pytest.raises(ValueError, match="empty"):
        load_mega_cache(tmp_path / "empty.bin")
    (tmp_path / "bad.bin").write_bytes(b"definitely not a cache" * 10)
    with pytest.raises(ValueError, match="corrupt"):
        load_mega_cache(tmp_path / "bad.bin")


def test_freeze_fail_raises_on_new_shape_and_warn_flags_it():
    out = run_script(f"""
import json, warnings, torch
from torch import nn
from mc.config import NetCompileConfig
from mc.compile import CompiledNet, Telemetry, freeze, unfreeze
tel = Telemetry().start()
net = CompiledNet(nn.Linear(4, 2), "lensnet", NetCompileConfig(train="default", inference="default"),
                  telemetry=tel, backend="eager")
for _ in range(3):
    net(torch.randn(2, 4), context="inference")
freeze("fail", tel.monitor)
net(torch.randn(2, 4), context="inference")          # warmed-up shape: fine
try:
    net(torch.randn(5, 4), context="inference")      # new shape after warm-up
    err = None
except RuntimeError as e:
    err = str(e)
unfreeze(tel.monitor)
freeze("warn", tel.monitor)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    net(torch.randn(7, 4), context="inference")
    snap = tel.snapshot()
print({MARK!r} + json.dumps({{"err": err, "warned": [str(w.message) for w in caught],
      "steady": snap["compile"]["steady"], "monitor_warnings": snap["compile"]["warnings"]}}))
""")
    assert out["err"] is not None and "size mismatch" in out["err"], out["err"]
    assert out["steady"]["compiles"] == 1 and out["steady"]["recompiles"] == 1
    assert any("compile after warm-up (freeze=warn)" in w for w in out["warned"])
    assert len(out["monitor_warnings"]) == 1


def test_reduce_overhead_on_cpu_reports_na_and_mega_cache_round_trip(tmp_path):
    why = mega_cache_unavailable()
    cache = tmp_path / "mega.bin"
    out = run_script(f"""
import json, torch
from torch import nn
from mc.config import NetCompileConfig
from mc.compile import CompiledNet, StepMarker, Telemetry, freeze, save_mega_cache, mega_cache_unavailable
tel = Telemetry().start()
net = CompiledNet(nn.Sequential(nn.Linear(4, 8), nn.GELU()), "gistnet",
                  NetCompileConfig(train="off", inference="reduce-overhead"), telemetry=tel)
marker = StepMarker([net])
with torch.no_grad():
    for _ in range(3):
        y = net(torch.randn(2, 4), context="inference"); marker.mark("iteration")
freeze("fail", tel.monitor)
with torch.no_grad():
    for _ in range(5):
        y = net(torch.randn(2, 4), context="inference"); marker.mark("iteration")
snap = tel.snapshot()
saved = None if mega_cache_unavailable() else save_mega_cache({str(cache)!r})
print({MARK!r} + json.dumps({{"status": tel.cudagraph_status(), "marker_active": marker.active,
      "warmup": snap["compile"]["warmup"], "steady": snap["compile"]["steady"], "saved": saved,
      "marks": snap["calls"]["marks"]}}))
""")
    assert out["status"] == "n/a (cpu)" and out["marker_active"] is False and out["marks"] == 0
    assert out["warmup"]["compiles"] == 1 and out["warmup"]["cudagraph_skips"] >= 1  # counted, not failed
    assert out["warmup"]["cudagraph_recordings"] == 0
    assert out["steady"]["compiles"] == 0 and out["steady"]["recompiles"] == 0
    if why:
        pytest.skip(f"Mega-Cache round trip skipped: {why}")
    assert out["saved"] is not None and out["saved"]["bytes"] > 0, out["saved"]
    loaded = run_script(f"""
import json
from mc.compile import load_mega_cache
print({MARK!r} + json.dumps(load_mega_cache({str(cache)!r})))
""")
    assert loaded["bytes"] == out["saved"]["bytes"]
    assert loaded["artifacts"] and sum(loaded["artifacts"].values()) > 0, loaded
