"""Benchmarks: eager vs torch.compile modes for the controller's three hot paths, in one run.

Cases (all through the controller's helpers, so the boundary's clones and step marks are timed too):

* ``lensnet_call@W``: one allocator LensNet call (``_lensnet_allocator_scores``) on a working context
  padded to bucket W, for every bucket of ``mc.bucket_ladder``;
* ``train_step``: a stage-2 micro-step's device half (``run_step`` + backward + ``end_micro_step``; the plan made
  ahead, as in training): GistNet forward/backward over the tree levels, the frozen base, LensNet forward/backward;
* ``tree_append``: a fresh lifetime gist tree appending ``2 * K**max_lod`` tokens, gisted in batched
  GistNet calls through ``_run_gistnet`` (padded to ``mc.gist_bucket_ladder``).

Each mode runs in its own subprocess (Dynamo state is process-global), with a fresh
``TORCHINDUCTOR_CACHE_DIR`` so "cold" really is cold. After the cold run the worker saves the
Mega-Cache (``torch.compiler.save_cache_artifacts``); a second fresh subprocess with another empty
cache dir loads it and times every case's first call again ("warm"). Per case: median time, ratio
to eager (same run, same inputs), first-call time cold and warm, and the number of graphs compiled.
Timings on CUDA are bracketed by ``torch.cuda.synchronize()``.

CLI: ``scripts/mc_bench.py`` (``main`` here). Output: JSON and a Markdown table.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

import torch

from mc.config import RunConfig, from_dict, to_dict
from mc.config_checks import validate
from mc.config_loading import apply_overrides
from mc.app.bench_cases import CASE_GROUPS, DEFAULT_CASES, build_cases
from mc.app.bench_markdown import decode_table, to_markdown  # noqa: F401 (re-exported: the workflow, report and tests import them from here)
from mc.io import write_text

MODES = ("eager", "default", "reduce-overhead", "max-autotune-no-cudagraphs")
PAIRED = ("decode", "refocus")  # case-name prefixes timed round-robin (their with/without-cache ratios)
# --quick: tiny nets and shapes, so a full quick run stays well under two minutes on a 2-core CPU.
QUICK_OVERRIDES = (
    "model.d_model=32", "model.n_layers=1", "model.n_heads=2", "model.max_seq_len=128",
    "gistnet.d_model=32", "gistnet.n_layers=1", "gistnet.n_heads=2",
    "lensnet.d_model=32", "lensnet.n_layers=1", "lensnet.n_heads=2",
    "mc.block_size=4", "mc.max_lod=2", "mc.max_entries=32", "mc.recent_tokens=8",
    "mc.bucket_ladder=[16,32]", "mc.gist_bucket_ladder=[4,16]", "mc.history_tokens=64",
    "mc.n_random_variants=1", "train.stage2.batch_size=1", "eval.tail_tokens=8",
    "data.recall.doc_tokens=256", "data.recall.n_records=2", "eval.doc_tokens=256",
    "bench.session_lengths=[500,5000]",
)


# ----------------------------------------------------------------------------- config


def bench_config(overrides: Sequence[str] = (), *, quick: bool = False) -> RunConfig:
    """The benchmark's config: Hydra-resolved when hydra-core is installed (presets work), else the
    schema defaults; ``quick`` adds :data:`QUICK_OVERRIDES` for keys the user did not set."""
    user_keys = {o.partition("=")[0] for o in overrides}
    extra = [o for o in QUICK_OVERRIDES if o.partition("=")[0] not in user_keys] if quick else []
    if importlib.util.find_spec("hydra") is not None:
        from mc.config_loading import load_config  # noqa: PLC0415

        return load_config([*extra, *overrides])
    return apply_overrides(RunConfig(), [*extra, *overrides])


# ----------------------------------------------------------------------------- worker (one mode)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _graphs(monitor) -> dict:
    """Compile counters so far (None where the monitor could not see them)."""
    if not monitor.started:
        return {"compiles": 0, "graphs": 0, "graph_breaks": 0}
    w = monitor.snapshot()["warmup"]
    return {"compiles": w.get("compiles"), "graphs": w.get("unique_graphs"), "graph_breaks": w.get("graph_breaks")}


def run_worker(cfg: RunConfig, mode: str, *, phase: str, cache_path: str | None, reps: int,
               max_case_s: float, cases: Sequence[str] = DEFAULT_CASES) -> dict:
    """Run every case under ``mode`` in THIS process (call it in a fresh subprocess)."""
    from mc.build import build_controller, resolve_device  # noqa: PLC0415
    from mc.compile.boundary import load_mega_cache, mega_cache_unavailable, save_mega_cache  # noqa: PLC0415
    from mc.compile.telemetry import Telemetry  # noqa: PLC0415

    net_mode = "off" if mode == "eager" else mode
    for net in (cfg.compile.lensnet, cfg.compile.gistnet):
        net.train = net.inference = net_mode
    cfg.compile.decode = net_mode  # the KV-cache decode step (decode@ cases)
    cfg.compile.freeze = "off"
    device = resolve_device(cfg.train.device)
    out: dict = {"mode": mode, "phase": phase, "device": str(device), "cases": {}}
    if phase == "warm":
        t = time.perf_counter()
        out["mega_cache_load"] = load_mega_cache(cache_path)
        out["mega_cache_load_s"] = time.perf_counter() - t
    telemetry = Telemetry(device=device)
    telemetry.start()  # count compiles even when nothing would start it (eager: stays at 0)
    ctrl = build_controller(cfg, device=device, telemetry=telemetry)

    def timed(fn) -> float:
        _sync(device)
        t = time.perf_counter()
        own = fn()  # a float: the seconds the case timed itself (set-up excluded)
        _sync(device)
        return own if isinstance(own, float) else time.perf_counter() - t

    paired: dict[str, tuple] = {}  # decode/refocus cases: timed round-robin, so load spikes hit both sides of a ratio
    # The warm phase times first calls after loading the Mega-Cache; a session case's first call is not one.
    groups = [c for c in cases if not (phase == "warm" and c == "session")]
    for name, fn in build_cases(ctrl, cfg, device, groups):
        before = _graphs(telemetry.monitor)
        first = timed(fn)
        after = _graphs(telemetry.monitor)
        rec = {"first_call_s": first}
        for k in after:
            rec[k] = None if after[k] is None or before[k] is None else after[k] - before[k]
        out["cases"][name] = rec
        if phase != "cold":
            continue
        for _ in range(2):  # CUDA graph trees: warm-up, record; then replays are timed
            fn()
        if name.startswith(PAIRED):
            paired[name] = (fn, [])
            continue
        times, budget_end = [], time.perf_counter() + max_case_s
        while len(times) < reps and (len(times) < 3 or time.perf_counter() < budget_end):
            times.append(timed(fn))
        rec.update(median_s=statistics.median(times), reps=len(times), min_s=min(times))
    budget_end = time.perf_counter() + max_case_s * len(paired)
    while paired and (n := len(next(iter(paired.values()))[1])) < reps and (n < 3 or time.perf_counter() < budget_end):
        for fn, times in paired.values():
            times.append(timed(fn))
    for name, (_, times) in paired.items():
        out["cases"][name].update(median_s=statistics.median(times), reps=len(times), min_s=min(times))
    if phase == "cold" and mode != "eager":
        why = mega_cache_unavailable()
        if why:
            out["mega_cache"] = {"status": f"n/a ({why})"}
        else:
            saved = save_mega_cache(cache_path)
            out["mega_cache"] = {"status": "saved" if saved else "n/a (no artifacts to save)", **(saved or {})}
    out["cudagraph"] = telemetry.cudagraph_status()
    return out


def _worker_main(args: argparse.Namespace) -> int:
    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads()))))
    cfg = validate(from_dict(RunConfig, json.loads(Path(args.cfg).read_text())))
    res = run_worker(cfg, args.worker, phase=args.phase, cache_path=args.cache, reps=args.reps,
                     max_case_s=args.max_case_s, cases=args.cases)
    write_text(args.out, json.dumps(res, default=str))
    return 0


# ----------------------------------------------------------------------------- orchestration


def _spawn(cfg_path: Path, mode: str, phase: str, work: Path, *, reps: int, max_case_s: float,
           timeout: float, cases: Sequence[str], quick: bool = False) -> dict:
    out = work / f"{mode}.{phase}.json"
    env = dict(os.environ)
    cache_dir = work / f"inductor-{mode}-{phase}"  # fresh and empty: nothing cached from earlier runs
    env["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir)
    env["TRITON_CACHE_DIR"] = str(cache_dir / "triton")
    if quick:  # no compile-worker pool: its start-up dominates a tiny quick run on a small CPU
        env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    cmd = [sys.executable, "-m", "mc.app.bench", "--worker", mode, "--phase", phase, "--cfg", str(cfg_path),
           "--out", str(out), "--cache", str(work / f"{mode}.megacache"), "--reps", str(reps),
           "--max-case-s", str(max_case_s), "--cases", *cases]
    root = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
    t = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    wall = time.perf_counter() - t
    if proc.returncode != 0 or not out.is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
        return {"error": f"worker exited with {proc.returncode}", "stderr_tail": tail}
    res = json.loads(out.read_text())
    res["process_wall_s"] = wall
    return res


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux; the platform's word for it elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_name(device: str) -> str:
    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return f"CPU {cpu_model()} ({os.cpu_count()} cores, {torch.get_num_threads()} threads)"


def run_bench(cfg: RunConfig, modes: Sequence[str] = MODES, *, quick: bool = False, reps: int | None = None,
              timeout: float = 900.0, progress: bool = True, cases: Sequence[str] = DEFAULT_CASES) -> dict:
    """Run every mode (eager first: it is the reference) and assemble the result dict."""
    bad_cases = [c for c in cases if c not in CASE_GROUPS]
    if bad_cases or not cases:
        raise ValueError(f"unknown case group(s) {bad_cases or cases}; expected some of {', '.join(CASE_GROUPS)}")
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise ValueError(f"unknown benchmark mode(s) {bad}; expected some of {', '.join(MODES)}")
    modes = ["eager", *[m for m in modes if m != "eager"]]
    reps = reps or (5 if quick else 20)
    max_case_s = 2.0 if quick else 10.0
    t0 = time.time()
    from mc.build import resolve_device  # noqa: PLC0415
    device = str(resolve_device(cfg.train.device))
    runs: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="mc-bench-") as tmp:
        work = Path(tmp)
        cfg_path = work / "cfg.json"
        cfg_path.write_text(json.dumps(to_dict(cfg)))
        for mode in modes:
            if progress:
                print(f"[bench] {mode}: cold run ...", flush=True)
            cold = _spawn(cfg_path, mode, "cold", work, reps=reps, max_case_s=max_case_s, timeout=timeout,
                          cases=cases, quick=quick)
            warm = None
            status = (cold.get("mega_cache") or {}).get("status", "n/a (eager: nothing compiled)")
            if status == "saved":
                if progress:
                    print(f"[bench] {mode}: warm Mega-Cache run ...", flush=True)
                warm = _spawn(cfg_path, mode, "warm", work, reps=reps, max_case_s=max_case_s, timeout=timeout,
                              cases=cases, quick=quick)
            runs[mode] = {"cold": cold, "warm": warm, "mega_cache": status}
    rows = []
    eager_cases = runs["eager"]["cold"].get("cases", {})
    for mode in modes:
        r = runs[mode]
        cases = r["cold"].get("cases", {})
        for name, rec in cases.items():
            ref = eager_cases.get(name, {}).get("median_s")
            warm_rec = ((r["warm"] or {}).get("cases") or {}).get(name)
            if r["warm"] is not None and r["warm"].get("error"):
                warm_first = f"n/a ({r['warm']['error']})"
            elif warm_rec is not None:
                warm_first = warm_rec["first_call_s"]
            elif name.startswith("session_"):
                warm_first = "n/a (not a first call)"
            else:
                warm_first = r["mega_cache"] if mode != "eager" else "n/a (eager)"
            rows.append({"case": name, "mode": mode, "median_s": rec["median_s"], "min_s": rec["min_s"],
                         "reps": rec["reps"], "ratio_to_eager": (rec["median_s"] / ref) if ref else None,
                         "first_call_cold_s": rec["first_call_s"], "first_call_warm_s": warm_first,
                         "graphs": rec.get("graphs"), "compiles": rec.get("compiles"),
                         "graph_breaks": rec.get("graph_breaks")})
    errors = {m: {"cold": runs[m]["cold"].get("error"), "warm": (runs[m]["warm"] or {}).get("error"),
                  "stderr_tail": runs[m]["cold"].get("stderr_tail") or (runs[m]["warm"] or {}).get("stderr_tail")}
              for m in modes if runs[m]["cold"].get("error") or (runs[m]["warm"] or {}).get("error")}
    return {
        "kind": "mc-bench", "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "torch": torch.__version__,
        "python": platform.python_version(), "device": device, "device_name": device_name(device),
        "quick": quick, "modes": list(modes), "cases": list(cases), "seconds": round(time.time() - t0, 1),
        "config": {"model": to_dict(cfg.model), "mc": to_dict(cfg.mc), "stage2_batch": cfg.train.stage2.batch_size,
                   "preset": cfg.preset},
        "rows": rows, "errors": errors,
        "cudagraph": {m: runs[m]["cold"].get("cudagraph") for m in modes},
        "mega_cache": {m: runs[m]["mega_cache"] for m in modes},
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="mc_bench.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", type=Path, default=None, help="write the result JSON here")
    p.add_argument("--md", type=Path, default=None, help="write the Markdown table here")
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES, help="modes to compare (eager always runs)")
    p.add_argument("--quick", action="store_true", help="tiny shapes and few repetitions (tests, smoke runs)")
    p.add_argument("--cases", nargs="+", default=list(DEFAULT_CASES), choices=CASE_GROUPS,
                   help="case groups: lensnet (allocator call per bucket), train (stage-2 micro-step), tree (appends), "
                   "session (one append and one refocus at each of bench.session_lengths), decode (s per generated "
                   "token with/without the KV cache per bucket), refocus (+ cache rebuild)")
    p.add_argument("--reps", type=int, default=None, help="timed repetitions per case (default 5 quick / 20)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per worker subprocess")
    p.add_argument("overrides", nargs="*", help="config overrides key.path=value (e.g. train.device=cuda)")
    # worker-only arguments (the parent spawns `python -m mc.app.bench --worker MODE ...`)
    p.add_argument("--worker", choices=MODES, help=argparse.SUPPRESS)
    p.add_argument("--phase", choices=("cold", "warm"), default="cold", help=argparse.SUPPRESS)
    p.add_argument("--cfg", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--cache", help=argparse.SUPPRESS)
    p.add_argument("--max-case-s", type=float, default=10.0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        args.reps = args.reps or 20
        return _worker_main(args)
    cfg = bench_config(args.overrides, quick=args.quick)
    res = run_bench(cfg, args.modes, quick=args.quick, reps=args.reps, timeout=args.timeout, cases=args.cases)
    md = to_markdown(res)
    print(md)
    for path, text in ((args.json, json.dumps(res, indent=1, default=str)), (args.md, md)):
        if path is not None:
            write_text(path, text)
    return 1 if res["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
