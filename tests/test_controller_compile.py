"""MCController under torch.compile: zero recompiles after warm-up, eager parity, held outputs, GPU.

Each compile mode runs tests/_compile_scenarios.py in its own fresh interpreter (Dynamo and
CUDA-graph-tree state is process-global); both CPU modes start together when the first test needs
them, so their compiles overlap. The scenario: ``controller.warmup()`` (freeze="fail"), held-output
checks, eager parity (2 accumulated micro-steps + an inference prefill), then 50 micro-steps
(accumulation 2, AdamW) and an inference session with 20+ refocuses. The compile monitor's steady
phase must show no compile of any kind.

The inductor cache lives in ``.cache/inductor`` (persistent): a cold first run compiles ~11 graphs
per mode (minutes on a 2-core CPU); warm runs take seconds.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from _subproc import collect, start  # shared fresh-interpreter runner (tests/_subproc.py)

SCENARIOS = Path(__file__).with_name("_compile_scenarios.py")
CPU_MODES = ("default", "reduce-overhead")
TIMEOUT_S = 900
MIB = 1 << 20


def _start(mode: str, device: str) -> subprocess.Popen:
    return start([str(SCENARIOS), "steady", mode, device])


def _finish(proc: subprocess.Popen) -> dict:
    res = collect(proc, TIMEOUT_S)
    if "error" in res:
        raise AssertionError(f"scenario failed: {res['error']}\n{res.get('traceback', '')}")
    return res


@pytest.fixture(scope="module")
def cpu_results():
    """Start both CPU modes at once (one thread each); results are collected on first use."""
    procs = {m: _start(m, "cpu") for m in CPU_MODES}
    done: dict = {}

    def get(mode: str) -> dict:
        if mode not in done:
            done[mode] = _finish(procs[mode])
        return done[mode]

    yield get
    for p in procs.values():
        if p.poll() is None:
            p.kill()
            p.communicate()


def _assert_no_compiles_after_warmup(res: dict) -> None:
    warm, steady = res["warmup"], res["steady"]
    assert res["frozen"] is True
    assert warm["compiles"] > 0, "nothing compiled during warm-up: the test would prove nothing"
    assert warm["graph_breaks"] == 0 and warm["failures"] == [], warm
    problems = {k: steady[k] for k in ("compiles", "lazy_backward_compiles", "recompiles", "graph_breaks",
                                       "unique_graphs", "cudagraph_recordings") if steady[k] != 0}
    assert not problems, f"after warm-up: {problems}; reasons {steady['recompile_reasons']} " \
                         f"{steady['graph_break_reasons']} {steady['failures']}"
    assert steady["recompile_reasons"] == [] and steady["failures"] == []


def _assert_loop_ran(res: dict) -> None:
    loop = res["loop"]
    assert loop["micro_steps"] == 50 and loop["optimizer_steps"] == 25
    assert loop["losses_finite"] and loop["grads_finite"]
    assert loop["refocuses"] >= 20 and loop["lensnet_inference_calls"] >= 20
    assert res["reentrance"] == []
    calls = res["totals"]
    for net in ("lensnet", "gistnet"):  # every call was cloned once at the boundary
        for ctx in ("train", "inference"):
            assert res["clones"][net][ctx] == calls[net][ctx]["calls"]


def _assert_parity(res: dict) -> None:
    par = res["parity"]
    assert all(par["scores_close"]), par
    assert par["grad_mismatch"] == [], par["grad_mismatch"]
    assert par["grad_nonzero"] > 0  # the accumulated grads compared are real, not all zero
    assert par["alloc_scores_close"], par
    assert max(par["tree_level_max_abs"]) <= 1e-4, par


def _assert_held(res: dict) -> None:
    held = res["held"]
    for name, check in held["checks"].items():
        assert check["unchanged"], f"{name}: the kept output changed after later calls"
        assert check["matches_eager"], f"{name}: kept output differs from eager by {check['max_abs_vs_eager']}"
    assert held["raw_spy_calls"] > 0 and not any(held["raw_returned"]), "a helper returned the raw compiled output"
    assert all(d == [1, 1] for d in held["clone_deltas"]), held["clone_deltas"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", CPU_MODES)
def test_compiled_loop_and_session_do_not_recompile_after_warmup(cpu_results, mode):
    res = cpu_results(mode)
    _assert_no_compiles_after_warmup(res)
    _assert_loop_ran(res)
    assert res["cudagraph"] == "n/a (cpu)" and res["marker_active"] is False and res["marks"] == 0
    assert res["mark_requests"]["after backward"] >= 50 + 3  # warm-up + loop micro-steps, requested even on CPU


@pytest.mark.slow
@pytest.mark.parametrize("mode", CPU_MODES)
def test_compiled_scores_and_accumulated_grads_match_eager(cpu_results, mode):
    _assert_parity(cpu_results(mode))


@pytest.mark.slow
@pytest.mark.parametrize("mode", CPU_MODES)
def test_compiled_held_outputs_survive_later_calls(cpu_results, mode):
    _assert_held(cpu_results(mode))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_reduce_overhead_records_graphs_only_in_warmup_and_stays_flat():
    """CUDA graphs on: recorded in warm-up, none after; 0 skips; no overwritten outputs; flat memory.

    Results JSON goes to ``$MC_GPU_RESULTS`` when set (the scenario writes it, pass or fail).
    """
    res = _finish(_start("reduce-overhead", "cuda"))
    assert res["marker_active"] is True and res["marks"] > 0  # step marks really issued
    warm, steady = res["warmup"], res["steady"]
    assert warm["cudagraph_recordings"] > 0, warm
    assert warm["cudagraph_skips"] == 0 and steady["cudagraph_skips"] == 0, (warm["cudagraph_skip_reasons"],
                                                                               steady["cudagraph_skip_reasons"])
    assert res["cudagraph"] == "ok", (res["cudagraph"], "recordings after warm-up, counted after each phase:",
                                      res.get("recordings_after"))
    _assert_no_compiles_after_warmup(res)  # includes 0 recordings after warm-up
    _assert_loop_ran(res)
    _assert_held(res)  # an "overwritten by a subsequent run" error would have failed the scenario
    _assert_parity(res)
    loop = res["loop"]
    for before, after in (("mem_train_before", "mem_train_after"), ("mem_refocus_before", "mem_refocus_after")):
        grown = loop[after]["allocated"] - loop[before]["allocated"]
        assert abs(grown) <= MIB, f"{before}->{after}: memory_allocated changed by {grown} bytes"
