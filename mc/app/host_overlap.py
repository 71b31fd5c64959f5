"""How long a stage-2 micro-step waits for host work, inline vs prefetched (obsidian "Training").

Owns :func:`measure` and the CLI behind ``scripts/mc_host_overlap.py``. The host work of one
micro-step is what :class:`mc.train.prefetch.PlanPrefetcher` makes: a data batch
(``sampler.sample``) and its plan (``controller.prepare_step``: variants, gather tables, LOD
maps). Measured at a config's geometry (default: the ``h100`` preset: B=8, 4 variants, 4096
tokens, 512 entries) with the real sampler and planner; the device's share of a micro-step is
simulated, so the number is about the host alone and runs on any machine:

* ``launch_ms`` of Python that holds the GIL (what launching the micro-step's kernels costs the
  main thread), then ``device_ms`` of waiting with the GIL released (the GPU running).

Reported per mode: the wait per micro-step (time inside ``next()``: the whole host work inline;
the queue wait when prefetched) as mean / median / p95 / max, plus a breakdown of one inline
micro-step's host work (sampler, variants, tables + token ids, pinning where CUDA exists).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Sequence

import torch

from mc.config_loading import load_config
from mc.io import write_text


def _spin(ms: float) -> None:
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:  # pure Python: holds the GIL like launch code does
        pass


def _stats(xs: list[float]) -> dict:
    xs_ms = sorted(x * 1e3 for x in xs)
    return {"mean_ms": statistics.fmean(xs_ms), "median_ms": statistics.median(xs_ms),
            "p95_ms": xs_ms[min(len(xs_ms) - 1, int(0.95 * len(xs_ms)))], "max_ms": xs_ms[-1], "n": len(xs_ms)}


def _breakdown(cfg, sampler, reps: int) -> dict:
    from mc.gather import gather_tables, token_ids_of  # noqa: PLC0415
    from mc.variants import sample_variants  # noqa: PLC0415

    mc, b, t = cfg.mc, cfg.train.stage2.batch_size, cfg.mc.history_tokens
    gen = torch.Generator().manual_seed(1)
    parts: dict[str, list[float]] = {"sampler": [], "sample_variants": [], "gather_tables+token_ids": [], "pin_memory": []}
    for _ in range(reps):
        t0 = time.perf_counter()
        ids = sampler.sample(b, t, gen).tokens
        t1 = time.perf_counter()
        wcs = [wc for _ in range(b) for wc in sample_variants(
            t, block_size=mc.block_size, max_lod=mc.max_lod, max_entries=mc.max_entries,
            recent_tokens=mc.recent_tokens, n_random=mc.n_random_variants, generator=gen)]
        t2 = time.perf_counter()
        tab = gather_tables(wcs, batch=b, tokens=t, max_lod=mc.max_lod, bucket=max(mc.bucket_ladder))
        token_ids_of(ids, tab["token_index"], len(wcs) // b)
        t3 = time.perf_counter()
        if torch.cuda.is_available():
            for v in tab.values():
                v.pin_memory()
        t4 = time.perf_counter()
        for k, dt in zip(parts, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            parts[k].append(dt)
    out = {k: statistics.median(v) * 1e3 for k, v in parts.items()}
    if not torch.cuda.is_available():
        out["pin_memory"] = "n/a (no CUDA: plans are not pinned)"
    return out


def measure(overrides: Sequence[str] = ("preset=h100",), *, micro_steps: int = 40, launch_ms: float = 10.0,
            device_ms: Sequence[float] = (30.0, 15.0), depth: int = 2) -> dict:
    """Inline (depth 0) vs prefetched (``depth``) waits, for each simulated ``device_ms``."""
    from mc.step_plan import plan_micro_step  # noqa: PLC0415
    from mc.train.common import make_sampler  # noqa: PLC0415
    from mc.train.prefetch import PlanPrefetcher  # noqa: PLC0415
    from mc.working_context import bucket_for  # noqa: PLC0415

    cfg = load_config([*overrides, "train.device=cpu"])
    mc, b, t = cfg.mc, cfg.train.stage2.batch_size, cfg.mc.history_tokens
    bucket = bucket_for(mc.max_entries, mc.bucket_ladder)
    pin = torch.cuda.is_available()
    t0 = time.perf_counter()
    sampler = make_sampler(cfg, "train", t)
    sampler_build_s = time.perf_counter() - t0
    runs = []
    for dev_ms in device_ms:
        for d in (0, depth):
            gen = torch.Generator().manual_seed(cfg.train.seed)
            pf = PlanPrefetcher(lambda: plan_micro_step(sampler.sample(b, t, gen).tokens, mc, bucket, gen, pin=pin),
                                gen, depth=d)
            with pf:
                t_start = time.perf_counter()
                for _ in range(micro_steps):
                    pf.next()
                    _spin(launch_ms)
                    time.sleep(dev_ms / 1e3)
                wall = time.perf_counter() - t_start
            waits = pf.waits[2:] if d else pf.waits  # prefetched: the first plans cannot have been made ahead
            runs.append({"mode": "inline" if d == 0 else f"prefetch depth {d}", "depth": d, "device_ms": dev_ms,
                         "launch_ms": launch_ms, "wait": _stats(waits), "first_wait_ms": pf.waits[0] * 1e3,
                         "step_ms": wall / micro_steps * 1e3})
    return {"kind": "mc-host-overlap", "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "torch": torch.__version__,
            "python": platform.python_version(), "machine": f"{platform.processor() or platform.machine()}, "
            f"{os.cpu_count()} cores, torch threads {torch.get_num_threads()}", "cuda": torch.cuda.is_available(),
            "overrides": list(overrides), "geometry": {"batch": b, "variants": 1 + mc.n_random_variants,
                                                       "tokens": t, "entries": mc.max_entries, "bucket": bucket},
            "micro_steps": micro_steps, "sampler_build_s": sampler_build_s,
            "host_work_breakdown_ms": _breakdown(cfg, sampler, reps=max(3, micro_steps // 4)), "runs": runs}


def to_markdown(res: dict) -> str:
    g = res["geometry"]
    lines = [f"### Stage-2 host work on the critical path: inline vs prefetched ({res['date']})", "",
             f"- machine: {res['machine']}; torch {res['torch']}, python {res['python']}, CUDA: {res['cuda']}",
             f"- geometry: B={g['batch']}, V={g['variants']}, T={g['tokens']}, entries={g['entries']} "
             f"(bucket {g['bucket']}); overrides `{' '.join(res['overrides'])}`; {res['micro_steps']} micro-steps per row",
             "- simulated device work per micro-step: `launch` ms of GIL-holding Python, then `device` ms of "
             "GIL-free waiting; *wait* = time the loop spent in `next()` (inline: all the host work)",
             "- host work of one inline micro-step (median): " + ", ".join(
                 f"{k} {v:.1f} ms" if isinstance(v, float) else f"{k} {v}"
                 for k, v in res["host_work_breakdown_ms"].items()), "",
             "| mode | device ms | launch ms | wait mean | wait median | wait p95 | wait max | step |",
             "|---|---|---|---|---|---|---|---|"]
    for r in res["runs"]:
        w = r["wait"]
        lines.append(f"| {r['mode']} | {r['device_ms']:.0f} | {r['launch_ms']:.0f} | {w['mean_ms']:.2f} ms | "
                     f"{w['median_ms']:.2f} ms | {w['p95_ms']:.2f} ms | {w['max_ms']:.2f} ms | {r['step_ms']:.1f} ms |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="mc_host_overlap.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=None, help="folder for <date>-<machine>-host-overlap.{json,md}")
    p.add_argument("--micro-steps", type=int, default=40)
    p.add_argument("--launch-ms", type=float, default=10.0)
    p.add_argument("--device-ms", type=float, nargs="+", default=[30.0, 15.0])
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("overrides", nargs="*", default=["preset=h100"], help="config overrides (default preset=h100)")
    a = p.parse_args(argv)
    if a.micro_steps < 3 or a.depth < 1:
        p.error("--micro-steps must be >= 3 and --depth >= 1")
    res = measure(a.overrides, micro_steps=a.micro_steps, launch_ms=a.launch_ms, device_ms=a.device_ms, depth=a.depth)
    md = to_markdown(res)
    print(md)
    if a.out is not None:
        a.out.mkdir(parents=True, exist_ok=True)
        stem = f"{time.strftime('%Y-%m-%d')}-{'gpu-host' if res['cuda'] else 'cpu'}-host-overlap"
        write_text(a.out / f"{stem}.json", json.dumps(res, indent=1) + "\n")
        write_text(a.out / f"{stem}.md", md)
        print(f"[host-overlap] wrote {a.out / stem}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
