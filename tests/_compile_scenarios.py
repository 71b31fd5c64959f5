"""Controller scenarios under torch.compile, run as scripts in fresh interpreters.

Dynamo and CUDA-graph-tree state is process-global, so every compile mode gets its own process
(tests/test_controller_compile.py starts them); the pytest process itself never compiles.

    python tests/_compile_scenarios.py steady <mode> <cpu|cuda>

runs, on one controller compiled with ``mode`` for both nets and both contexts (freeze="fail"):

1. ``controller.warmup()`` (every bucket x mode, 3 times; then the monitor's freeze point);
2. held outputs: LensNet/GistNet outputs kept from call A, compared after calls B, C, D with a
   detached copy and with an eager twin's output (same weights), plus a spy on
   ``CompiledNet.run`` proving the helper's tensor is never the raw compiled output;
3. parity: 2 accumulated micro-steps (scores, losses, ``.grad``) and an inference prefill
   (tree levels, allocator scores) against the eager twin;
4. the 50-micro-step stage-2 loop (grad accumulation 2, AdamW steps) and an inference session
   with 20 append+refocus rounds and 10 refocus-only rounds;
5. on CUDA: memory before/after the steady loops and CUDA-graph recordings per phase.

It prints one line ``RESULT_JSON:{...}`` (also written to ``$MC_GPU_RESULTS`` when set) and exits 1
when the scenario raised (the error text is in the JSON, so an "overwritten by a subsequent run"
error is reported, not lost). The config is the shared tiny one (tests/_tiny_config.py); the
controllers come from :func:`mc.build.build_controller` and the measuring tools (raw-output spy,
working-context inputs, gradients, CUDA memory, net-call counts) are the compile harness's
(:mod:`mc.harness.probes`), so the scenarios and the harness measure the same way.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import torch  # noqa: E402

from _tiny_config import D, K, tiny_config  # noqa: E402 - the one tiny test config
from mc.build import build_controller  # noqa: E402
from mc.controller import MCController  # noqa: E402
from mc.harness.probes import RawSpy, copy_weights, cuda_memory, grads_of, make_mwc, net_calls  # noqa: E402
from mc.working_context import MaterializedWC  # noqa: E402

MARK = "RESULT_JSON:"
LOOP_MICRO_STEPS = 50
GRAD_ACCUM = 2
REFOCUSES = 20


def random_mwc(size: int, length: int, seed: int, device: torch.device | str) -> MaterializedWC:
    """:func:`mc.harness.probes.make_mwc` with its own seeded generator (LODs over all of TINY's levels)."""
    return make_mwc(size, length, D, device=torch.device(device), generator=torch.Generator().manual_seed(seed),
                    max_lod=2)


def _clones(c: MCController, net: str, ctx: str) -> int:
    return c.telemetry.counters.clones[net][ctx]


def _calls(c: MCController, net: str, ctx: str) -> int:
    return net_calls(c)[f"{net}/{ctx}"]


def _capture_train_gists(c: MCController) -> list:
    """Wrap ``c``'s GistNet helper (an instance attribute: ``del c._run_gistnet`` undoes it) so that every
    training-context gist tensor it returns is appended to the returned list."""
    kept: list = []
    helper = c._run_gistnet

    def run(blocks, context):
        out = helper(blocks, context)
        if context == "train":
            kept.append(out)
        return out
    c._run_gistnet = run
    return kept


def held_outputs(c: MCController, e: MCController, device: torch.device, tol: float) -> dict:
    """Keep A, run B, C, D with different inputs, then check A (snapshot and eager twin)."""
    spy = RawSpy(c).install()
    report: dict = {"raw_returned": [], "clone_deltas": [], "checks": {}}

    def helper_call(net: str, ctx: str, fn):
        calls0, clones0 = _calls(c, net, ctx), _clones(c, net, ctx)
        spy.last.clear()  # only this call's raw output counts
        out = fn()
        held = out.scores if hasattr(out, "scores") else out  # train_step: the helper's scores
        if net in spy.last:
            report["raw_returned"].append(spy.aliased(net, held))
        report["clone_deltas"].append([_calls(c, net, ctx) - calls0, _clones(c, net, ctx) - clones0])
        return out

    def check(name: str, kept, snapshot, eager) -> None:
        report["checks"][name] = {
            "unchanged": bool(torch.equal(kept, snapshot)),
            "matches_eager": bool(torch.allclose(kept, eager, rtol=tol, atol=tol)),
            "max_abs_vs_eager": float((kept - eager).abs().max()),
        }

    # LensNet, inference helper: A at bucket 32, then B (16), C, D (32) with other contents.
    mwc_a = random_mwc(32, 29, 100, device)
    a = helper_call("lensnet", "inference", lambda: c.lensnet_scores(mwc_a, 200))
    a_snap = a.clone()
    a_eager = e.lensnet_scores(mwc_a, 200)
    for i, (size, length) in enumerate([(16, 12), (32, 31), (32, 20)]):
        mwc = random_mwc(size, length, 101 + i, device)
        helper_call("lensnet", "inference", lambda m=mwc: c.lensnet_scores(m, 150 + i))
    check("lensnet_inference", a, a_snap, a_eager)

    # GistNet, inference helper: A with 16 blocks, then 1, 4, 16 blocks of other contents.
    g = torch.Generator().manual_seed(7)
    blocks_a = torch.randn(16, K, D, generator=g).to(device)
    ga = helper_call("gistnet", "inference", lambda: c.gist_blocks(blocks_a))
    ga_snap, ga_eager = ga.clone(), e.gist_blocks(blocks_a)
    for n in (1, 4, 16):
        blocks = torch.randn(n, K, D, generator=g).to(device)
        helper_call("gistnet", "inference", lambda b=blocks: c.gist_blocks(b))
    check("gistnet_inference", ga, ga_snap, ga_eager)

    # LensNet and GistNet training helpers, through full micro-steps (the real training path; a GistNet
    # train call with a backward of its own is a CUDA-graph tree path that training never takes, so warm-up
    # never records it and the first GPU run counted its recording after warm-up). Kept from micro-step A:
    # the scores and the level-1 gists as the GistNet helper returned them.
    ids = torch.randint(0, 256, (4, 2, 64), generator=g)
    gen_c, gen_e = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    gists_c, gists_e = _capture_train_gists(c), _capture_train_gists(e)
    out_a = helper_call("lensnet", "train", lambda: c.train_step(ids[0], gen_c))
    out_a.total.backward()
    c.end_micro_step()
    sa, ga = out_a.scores, gists_c[0]
    sa_snap, ga_snap = sa.detach().clone(), ga.detach().clone()
    sa_eager = e.train_step(ids[0], gen_e).scores.detach()
    ga_eager = gists_e[0].detach()
    del c._run_gistnet, e._run_gistnet  # back to the class's helper
    for k in range(1, 4):
        out = c.train_step(ids[k], gen_c)
        out.total.backward()
        c.end_micro_step()
    check("lensnet_train", sa.detach(), sa_snap, sa_eager)
    check("gistnet_train", ga.detach(), ga_snap, ga_eager)
    report["raw_spy_calls"] = len(report["raw_returned"])
    spy.uninstall()
    return report


def _grads(c: MCController) -> dict:
    """Every trainable parameter's gradient (a missing one as zeros: eager leaves unused ones None)."""
    return {**grads_of(c.gistnet, "gistnet"), **grads_of(c.lensnet, "lensnet")}


def parity(c: MCController, e: MCController, device: torch.device, tol: float) -> dict:
    """Accumulated grads over 2 micro-steps, scores and losses; then an inference prefill."""
    for p in c.aux_parameters():
        if p.grad is not None:
            p.grad.zero_()  # in place: grads stay allocated (required under CUDA graphs)
    for p in e.aux_parameters():
        p.grad = None
    g = torch.Generator().manual_seed(11)
    ids = torch.randint(0, 256, (2, 2, 64), generator=g)
    gen_c, gen_e = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    rep: dict = {"tol": tol, "scores": [], "total": []}
    for k in range(2):
        oc, oe = c.train_step(ids[k], gen_c), e.train_step(ids[k], gen_e)
        oc.total.backward()
        c.end_micro_step()
        oe.total.backward()
        e.end_micro_step()
        rep["scores"].append(float((oc.scores.detach() - oe.scores.detach()).abs().max()))
        rep["total"].append(float((oc.total.detach() - oe.total.detach()).abs()))
        rep.setdefault("scores_close", []).append(
            bool(torch.allclose(oc.scores.detach(), oe.scores.detach(), rtol=tol, atol=tol)))
    gc_, ge = _grads(c), _grads(e)
    bad, worst, n_nonzero = [], 0.0, 0
    for name, gcn in gc_.items():
        gen_ = ge[name]
        n_nonzero += int(bool(gen_.any()))
        worst = max(worst, float((gcn - gen_).abs().max()))
        if not torch.allclose(gcn, gen_, rtol=tol, atol=tol):
            bad.append(f"{name}: max abs diff {float((gcn - gen_).abs().max()):.3g}")
    rep.update(grad_params=len(gc_), grad_nonzero=n_nonzero, grad_max_abs=worst, grad_mismatch=bad)

    prompt = torch.randint(0, 256, (150,), generator=g)
    sc, se = c.begin_session(prompt), e.begin_session(prompt)
    lv = [float((sc.tree.level(l) - se.tree.level(l)).abs().max()) for l in (1, 2)]
    mc_, me = sc.materialize(), se.materialize()
    a = c.lensnet_scores(mc_, sc.num_tokens)[: mc_.length]
    b = e.lensnet_scores(me, se.num_tokens)[: me.length]
    rep.update(tree_level_max_abs=lv, alloc_scores_max_abs=float((a - b).abs().max()),
               alloc_scores_close=bool(torch.allclose(a, b, rtol=tol, atol=tol)),
               inference_entries=[len(sc.wc), len(se.wc)])
    for p in c.aux_parameters():
        if p.grad is not None:
            p.grad.zero_()
    return rep


def steady_loop(c: MCController, device: torch.device) -> dict:
    """50 micro-steps (accumulation 2, AdamW), then a session with 20 refocuses; memory on CUDA."""
    opt = torch.optim.AdamW(c.aux_parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(21)
    rep: dict = {"losses": []}
    out = None
    for step in range(LOOP_MICRO_STEPS):
        if step == 2 * GRAD_ACCUM:  # optimizer state now exists: memory must stay flat from here on
            rep["mem_train_before"] = cuda_memory(device)
        ids = torch.randint(0, 256, (c.cfg.train.stage2.batch_size, c.cfg.mc.history_tokens), generator=gen)
        out = c.train_step(ids, gen)
        (out.total / GRAD_ACCUM).backward()
        c.end_micro_step()
        if (step + 1) % GRAD_ACCUM == 0:
            opt.step()
            c.zero_grad(opt)
        rep["losses"].append(out.total.detach())
    rep["mem_train_after"] = cuda_memory(device)
    losses = torch.stack(rep.pop("losses")).cpu()
    rep.update(micro_steps=LOOP_MICRO_STEPS, optimizer_steps=LOOP_MICRO_STEPS // GRAD_ACCUM,
               losses_finite=bool(torch.isfinite(losses).all()), first_loss=float(losses[0]),
               last_loss=float(losses[-1]), grads_finite=all(bool(torch.isfinite(p.grad).all())
                                                               for p in c.aux_parameters() if p.grad is not None))
    del out

    g = torch.Generator().manual_seed(31)
    s = c.begin_session(torch.randint(0, 256, (150,), generator=g))
    lens0 = _calls(c, "lensnet", "inference")
    iters = edits = 0
    for _ in range(REFOCUSES):
        c.append(torch.randint(0, 256, (3,), generator=g), refocus=False)
        r = c.refocus()
        iters, edits = iters + r.iterations, edits + len(r.edits)
    rep["mem_refocus_before"] = cuda_memory(device)
    for _ in range(10):  # refocus only: nothing grows, so memory must stay flat
        r = c.refocus()
        iters, edits = iters + r.iterations, edits + len(r.edits)
    rep["mem_refocus_after"] = cuda_memory(device)
    toks = c.generate(4)
    rep.update(refocuses=len(s.refocus_log), refocus_iterations=iters, edits=edits,
               lensnet_inference_calls=_calls(c, "lensnet", "inference") - lens0, generated=toks.tolist(),
               session_tokens=s.num_tokens, entries=len(s.wc))
    return rep


def _steady_recordings(c: MCController):
    """CUDA-graph recordings since warm-up ended (None where the monitor cannot see them)."""
    steady_ = c.telemetry.monitor.snapshot().get("steady") or {}
    return steady_.get("cudagraph_recordings")


def steady(mode: str, device_name: str) -> dict:
    device = torch.device(device_name)
    tol = 1e-4 if device.type == "cpu" else 2e-3
    res: dict = {"mode": mode, "device": str(device), "torch": torch.__version__}
    t0 = time.perf_counter()
    c = build_controller(tiny_config(mode), device=device)
    e = build_controller(tiny_config("off"), device=device)  # the eager twin: never compiled
    copy_weights(c, e)  # identical weights (both are built from train.seed already; this makes it explicit)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    c.warmup()
    res["warmup_s"] = round(time.perf_counter() - t0, 2)
    res["mem_after_warmup"] = cuda_memory(device)
    t1 = time.perf_counter()
    # CUDA-graph recordings after warm-up, counted after each phase: says which phase recorded (if any)
    res["held"] = held_outputs(c, e, device, tol)
    res["recordings_after"] = {"held": _steady_recordings(c)}
    res["parity"] = parity(c, e, device, tol)
    res["recordings_after"]["parity"] = _steady_recordings(c)
    res["loop"] = steady_loop(c, device)
    res["recordings_after"]["loop"] = _steady_recordings(c)
    res["steady_s"] = round(time.perf_counter() - t1, 2)
    snap = c.telemetry.snapshot()
    comp = snap.get("compile", {})  # absent when nothing compiles (mode "off": the eager reference)
    res.update(warmup=comp.get("warmup"), steady=comp.get("steady"), frozen=comp.get("frozen"),
               notes=comp.get("notes"), cudagraph=snap.get("cudagraph"), marks=snap["calls"]["marks"],
               mark_requests=snap["calls"]["mark_requests"], reentrance=snap["calls"]["reentrance"],
               totals=snap["calls"]["totals"], clones=snap["calls"]["clones"],
               marker_active=c.marker.active)
    try:  # compile-cache effectiveness (a warm .cache/inductor makes warm-up seconds, not minutes)
        from torch._dynamo.utils import counters
        res["caches"] = {k: int(v) for k, v in {**counters["inductor"], **counters["aot_autograd"]}.items()
                         if "cache" in k}
    except Exception as exc:  # noqa: BLE001 - private API: report, never fail the scenario on it
        res["caches"] = f"unavailable: {exc}"
    if device.type == "cuda":
        res["max_memory_allocated"] = torch.cuda.max_memory_allocated()
    return res


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "steady":
        print("usage: python tests/_compile_scenarios.py steady <mode> [cpu|cuda]", file=sys.stderr)
        return 2
    mode, device = argv[1], (argv[2] if len(argv) > 2 else "cpu")
    t0 = time.perf_counter()
    try:
        res = steady(mode, device)
        rc = 0
    except Exception as exc:  # reported in the JSON (e.g. a CUDA-graph "overwritten" error), then rc=1
        res = {"mode": mode, "device": device, "error": f"{type(exc).__name__}: {exc}",
               "traceback": traceback.format_exc()}
        rc = 1
    res["total_s"] = round(time.perf_counter() - t0, 2)
    line = json.dumps(res, default=str)
    path = os.environ.get("MC_GPU_RESULTS")
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(res, indent=2, default=str) + "\n")
    print(MARK + line, flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
