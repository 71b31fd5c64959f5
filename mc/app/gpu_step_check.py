"""The stage-2 micro-step on the proof kit's config: host syncs, and what the aux nets cost.

Owns the ``sync`` part of ``scripts/gpu_check.sh`` (:mod:`mc.app.gpu_check` runs it in a fresh
process: ``python -m mc.app.gpu_step_check --json OUT [key=value ...]``):

* ``meta_audit``: :func:`mc.train.sync_audit.audit_micro_step` at the config's geometry (no host
  read of a device value, no blocking host->device copy; runs anywhere);
* ``cuda_sync``: real micro-steps under ``torch.cuda.set_sync_debug_mode("error")`` after the
  compiled boundary's warm-up (``n/a`` without CUDA);
* ``timing``: a micro-step (``run_step`` + backward + ``end_micro_step``, plans made beforehand
  as the prefetch thread makes them) vs the base model's forward + backward alone on the same
  gathered inputs; ``aux_overhead`` = micro-step / base - 1 is what GistNet, LensNet and the
  preference loss add (target on a GPU: <= 0.15).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import torch

from mc.io import write_text


def _timed(fn: Callable[[], None], device: torch.device, reps: int) -> float:
    """Median seconds of ``fn`` over ``reps`` calls after two unmeasured ones (synchronised on CUDA)."""
    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    for _ in range(2):
        fn()
    times = []
    for _ in range(reps):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def step_timing(ctrl, cfg, reps: int) -> dict:
    """Median micro-step vs base-only forward+backward, in ms, on the controller's device."""
    from mc.gather import gather_planned  # noqa: PLC0415
    from mc.nets.losses import base_tail_loss  # noqa: PLC0415

    b, t = cfg.train.stage2.batch_size, cfg.mc.history_tokens
    gen = torch.Generator().manual_seed(cfg.train.seed + 1)
    plans = [ctrl.prepare_step(torch.randint(0, 256, (b, t), generator=gen), gen) for _ in range(4)]
    opt = torch.optim.SGD(ctrl.aux_parameters(), lr=0.0)  # zero_grad only (keeps grads allocated under CUDA graphs)
    i = iter(range(10**9))

    def micro() -> None:
        out = ctrl.run_step(plans[next(i) % len(plans)])
        out.total.backward()
        ctrl.end_micro_step()
        ctrl.zero_grad(opt)

    p = plans[0].to(ctrl.device)
    with torch.no_grad():  # gist values do not matter for the base's cost; the nets are only called via the helpers
        tok = ctrl.base.embed(p.ids)  # [B, T, D]
        levels = [tok] + [tok.new_zeros(b, t // cfg.mc.block_size**lv, tok.shape[-1])
                          for lv in range(1, cfg.mc.max_lod + 1)]
        embeds, mask = gather_planned(levels, p.index, p.lengths)
    leaf = embeds.detach().requires_grad_()  # the real step back-propagates into the gists: same work

    def base_only() -> None:
        base_tail_loss(ctrl.base_logits, leaf, p.positions, p.lods, mask, p.token_ids, p.lengths,
                       cfg.mc.recent_tokens)[0].mean().backward()  # the step's own base work
        leaf.grad = None

    micro_s = _timed(micro, ctrl.device, reps)
    base_s = _timed(base_only, ctrl.device, reps)
    return {"micro_step_ms": micro_s * 1e3, "base_fwd_bwd_ms": base_s * 1e3, "aux_overhead": micro_s / base_s - 1,
            "reps": reps, "rows": b * (1 + cfg.mc.n_random_variants), "device": str(ctrl.device)}


def run(overrides: Sequence[str], *, reps: int) -> dict:
    from mc.build import build_controller, resolve_device  # noqa: PLC0415
    from mc.config_loading import load_config  # noqa: PLC0415
    from mc.train.common import setup_device  # noqa: PLC0415
    from mc.train.sync_audit import audit_micro_step, cuda_sync_check  # noqa: PLC0415

    cfg = load_config(list(overrides))
    out: dict = {"overrides": list(overrides), "meta_audit": audit_micro_step(cfg)}
    device = resolve_device(cfg.train.device)
    setup_device(cfg)
    ctrl = build_controller(cfg, device=device)
    ctrl.gistnet.train()
    ctrl.lensnet.train()
    t = time.perf_counter()
    if cfg.compile.any_on:
        ctrl.warmup()
    out["warmup_s"] = time.perf_counter() - t
    out["cuda_sync"] = cuda_sync_check(ctrl, cfg) if device.type == "cuda" else {"passed": None, "error": None,
                                                                                 "status": "n/a (no CUDA)"}
    out["timing"] = step_timing(ctrl, cfg, reps)
    steady = ctrl.telemetry.monitor.snapshot()["steady"] if ctrl.telemetry.monitor.started else None
    out["compiles_after_warmup"] = (steady or {}).get("compiles", 0)
    out["passed"] = bool(out["meta_audit"]["passed"] and out["cuda_sync"]["passed"] is not False)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mc.app.gpu_step_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", type=Path, required=True, help="write the result here")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("overrides", nargs="*", help="Hydra overrides (e.g. preset=h100 compile.lensnet.train=reduce-overhead)")
    a = p.parse_args(argv)
    res = run(a.overrides, reps=a.reps)
    a.json.parent.mkdir(parents=True, exist_ok=True)
    write_text(a.json, json.dumps(res, indent=1, default=str) + "\n")
    t = res["timing"]
    print(f"[sync] meta audit {'PASS' if res['meta_audit']['passed'] else 'FAIL'}; cuda sync "
          f"{res['cuda_sync'].get('status') or ('PASS' if res['cuda_sync']['passed'] else 'FAIL')}; micro-step "
          f"{t['micro_step_ms']:.1f} ms vs base fwd+bwd {t['base_fwd_bwd_ms']:.1f} ms (aux +{100 * t['aux_overhead']:.0f}%)")
    return 0 if res["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
