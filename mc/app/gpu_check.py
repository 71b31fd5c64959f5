"""The GPU proof kit: every GPU check in one command, inside a time budget, into one dated report.

Owns the orchestration behind ``scripts/gpu_check.sh`` (which installs the carried Hydra wheels
first; see obsidian/Runbook.md "GPU proof"). Parts, each in a fresh process with its own cap:

* ``tests``: ``pytest -m gpu`` (on the dry run they are collected and skipped: n/a);
* ``sync``: the micro-step at the kit's geometry with LensNet + GistNet compiled as ``mc_run.sh``
  compiles them: host-sync audit, ``set_sync_debug_mode("error")``, micro-step vs base cost
  (:mod:`mc.app.gpu_step_check`);
* ``harness``: ``scripts/mc_compile_harness.py --strict`` with ``mc_run.sh``'s flags (its verdict
  goes where the workflow's compile gate reuses it);
* ``bench``: ``scripts/mc_bench.py``, eager vs ``default`` vs ``reduce-overhead`` (allocator LensNet
  call at every bucket, the stage-2 micro-step, the tree append);
* ``workflow``: ``bash mc_run.sh`` end to end with few steps;
* ``overlap``: :mod:`mc.app.host_overlap` (the host wait per micro-step, on this machine's CPU);
* ``smollm2`` (only when named: ``--part smollm2``): SmolLM2-135M as the base at GPU scale, the
  ``h100_smollm2`` preset shortened to one call, after joining the GGUF the earlier calls carried in
  parts (:mod:`mc.app.carry_model`); n/a when the model is not on the machine.

GPU: the ``h100`` preset. ``--dry-run``: the same parts on tiny shapes on the CPU (CUDA-only
checks read n/a) into a temporary folder, never ``bench/results``. Each part writes
``OUT/parts/<part>.json``; after every part ``OUT/<date>-<gpu>.json`` and ``.md`` are rebuilt from
all part files there, so separate calls (``--part``) merge by copying their parts into one folder
and running ``--report-only``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Sequence

from mc.app.gpu_report import part_ok, write_report
from mc.io import write_text

ROOT = Path(__file__).resolve().parents[2]
PARTS = ("tests", "sync", "harness", "bench", "overlap", "workflow")  # the order they run in ("all")
OPT_IN_PARTS = ("smollm2",)  # run only when named: the model must be carried first (obsidian Runbook)
# Caps (--cap PART=S overrides); the first H100 run (obsidian Runbook) took 21-212 s a part, well inside them.
CAPS_S = {"tests": 120, "sync": 210, "harness": 360, "bench": 480, "overlap": 30, "workflow": 360, "smollm2": 540}
# The dry run compiles from a cold Inductor cache on whatever cores CI gives it: its sync part took 63 s on a 2-core
# VM, 129 s pinned to one of its cores (as beside another test worker in CI, where it ran past 120 s), hence 300.
DRY_CAPS_S = {"tests": 120, "sync": 300, "harness": 240, "bench": 300, "workflow": 300, "overlap": 60, "smollm2": 300}
MIN_USEFUL_S = 20  # a part with less time left than this is not started
FLAGS = ["--mc_compile_lensnet=1", "--mc_compile_lensnet_inference=1", "--mc_compile_gistnet=1"]  # = mc_run.sh
GPU_GEOMETRY = ["train.device=cuda"]  # on top of --preset h100
DRY_GEOMETRY = ["train.device=cpu", "data.source=recall", "data.recall.doc_tokens=64", "data.recall.n_records=1",
                "data.recall.key_len=2", "data.recall.value_len=2", "model.d_model=32", "model.n_layers=1",
                "model.n_heads=2", "model.max_seq_len=64", "gistnet.d_model=16", "gistnet.n_layers=1",
                "gistnet.n_heads=2", "lensnet.d_model=16", "lensnet.n_layers=1", "lensnet.n_heads=2",
                "mc.block_size=4", "mc.max_lod=2", "mc.max_entries=32", "mc.recent_tokens=8",
                "mc.bucket_ladder=[32]", "mc.gist_bucket_ladder=[1,4]", "mc.history_tokens=64",
                "mc.n_random_variants=1", "train.stage2.batch_size=1", "allocator.inference.refocus_interval=4",
                "eval.tail_tokens=8", "eval.doc_tokens=64", "eval.n_docs=2"]
GPU_STEPS = ["train.stage1.steps=40", "train.stage1.warmup_steps=5", "train.stage1.eval_every=40",
             "train.stage1.ckpt_every=40", "train.stage1.eval_batches=2", "train.stage2.steps=12",
             "train.stage2.warmup_steps=2", "train.stage2.eval_every=12", "train.stage2.ckpt_every=12",
             "train.stage2.eval_batches=1", "train.log_every=4", "eval.n_docs=4", "bench.enabled=false"]
# The smollm2 part (opt-in: --part smollm2): the GPU-scale SmolLM2 preset shortened to one call, and its CPU dry run.
GPU_SMOLLM2 = ["--preset=h100_smollm2", "train.stage2.steps=200", "train.stage2.warmup_steps=20",
               "train.stage2.eval_every=200", "train.stage2.ckpt_every=200", "train.stage2.eval_batches=1",
               "eval.n_docs=8", "eval.tasks.tasks=[passkey]", "eval.tasks.multiples=[2,8]",
               "eval.tasks.n_per_cell=4", "bench.enabled=false"]  # ~171 s of stage 2 and ~75 s of evaluation on an H100
DRY_SMOLLM2 = ["--preset=smollm2", "train.device=cpu", "train.stage2.steps=2", "train.stage2.warmup_steps=1",
               "train.stage2.eval_every=2", "train.stage2.ckpt_every=2", "train.stage2.eval_batches=1",
               "eval.n_docs=2", "eval.tasks.tasks=[passkey]", "eval.tasks.multiples=[8]", "eval.tasks.depths=[0.5]",
               "eval.tasks.n_per_cell=1", "eval.tasks.variants=[full,compressed,oracle]", "bench.enabled=false"]
DECODE_PROMPT = "The quick brown fox jumps over the lazy dog. Once upon a time, in a village by the river,"
DRY_STEPS = ["train.stage1.steps=3", "train.stage1.warmup_steps=1", "train.stage1.eval_every=3",
             "train.stage1.ckpt_every=3", "train.stage1.eval_batches=1", "train.stage1.batch_size=2",
             "train.stage2.steps=2", "train.stage2.warmup_steps=1", "train.stage2.eval_every=2",
             "train.stage2.ckpt_every=2", "train.stage2.eval_batches=1", "train.stage2.grad_accum=1",
             "train.log_every=2", "bench.enabled=false"]


def compile_overrides() -> list[str]:
    """``mc_run.sh``'s flags as Hydra overrides (for the parts that take overrides only)."""
    from mc.config_loading import COMPILE_FLAGS  # noqa: PLC0415

    return [f"{key}=reduce-overhead" for keys in COMPILE_FLAGS.values() for key in keys]


def environment(dry_run: bool) -> dict:
    import torch  # noqa: PLC0415

    cuda = torch.cuda.is_available()
    env = {"date": time.strftime("%Y-%m-%d"), "time": time.strftime("%H:%M:%S %Z"), "dry_run": dry_run,
           "torch": torch.__version__, "cuda_runtime": torch.version.cuda, "cuda_available": cuda,
           "python": platform.python_version(), "cpu_count": os.cpu_count(), "platform": platform.platform(),
           "device": torch.cuda.get_device_name(0) if cuda else f"CPU {platform.machine()}"}
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        env["nvidia_smi"] = smi.stdout.strip() or smi.stderr.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        env["nvidia_smi"] = f"n/a ({type(exc).__name__})"
    return env


def stage_seconds(log: Sequence[str]) -> dict[str, float]:
    """``{stage: seconds}`` from the workflow's ``[run10] STAGE: done in S s`` lines."""
    return {m.group(1): float(m.group(2)) for ln in log if (m := re.search(r"\[run10\] (\w+): done in ([\d.]+) s", ln))}


def run_logged(cmd: Sequence[str], cap_s: float, *, env: dict | None = None, tail: int = 60) -> dict:
    """Run ``cmd`` (output streamed through and kept), killed with its process group after ``cap_s``."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(list(cmd), cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, bufsize=1)
    lines: list[str] = []

    def pump() -> None:
        for line in proc.stdout:
            sys.stdout.write(line)
            lines.append(line.rstrip("\n"))
    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    timed_out = False
    try:
        proc.wait(timeout=cap_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, 9)
        proc.wait()
    reader.join(timeout=10)
    return {"rc": proc.returncode, "timed_out": timed_out, "seconds": round(time.perf_counter() - t0, 1),
            "command": " ".join(cmd), "log": lines, "log_tail": lines[-tail:]}


class Kit:
    """One invocation: the parts asked for, their caps, the output folder."""

    def __init__(self, dry_run: bool, out: Path, budget_s: float, caps: dict[str, float],
                 bench_cases: Sequence[str] = ("lensnet", "train", "tree")) -> None:
        self.dry, self.out, self.deadline = dry_run, out, time.monotonic() + budget_s
        self.caps, self.bench_cases = caps, list(bench_cases)
        self.env_info = environment(dry_run)
        self.name = "gpu-check-" + ("dry-run" if dry_run else re.sub(r"[^a-z0-9]+", "-", self.env_info["device"].lower()))
        self.geometry = DRY_GEOMETRY if dry_run else GPU_GEOMETRY
        self.preset = "smoke" if dry_run else "h100"
        self.scratch = Path(tempfile.mkdtemp(prefix="mc-gpu-check-scratch-"))  # not OUT: only 8 files come back
        # GPU: runs/ of the checkout, so a later call on a still-warm machine finds the harness verdict
        self.run_dir = (self.scratch if dry_run else ROOT) / "runs" / self.name
        self.child_env = dict(os.environ, MC_PYTHON=sys.executable, MC_PROGRESS="0", PYTHONUNBUFFERED="1",
                              PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
        self.child_env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(ROOT / ".cache" / "inductor"))

    def finish(self, failed: Sequence[str]) -> None:
        """Remove the scratch folder (the parts' logs and figures are in OUT already), unless a part failed: then
        its intermediate files (the dry run's trained run folders, the bench and generate records) are what one
        reads to see why, so the folder stays and its path is printed."""
        if failed:
            print(f"[gpu-check] scratch kept for the failed part(s) {', '.join(failed)}: {self.scratch}", flush=True)
        else:
            shutil.rmtree(self.scratch, ignore_errors=True)  # temp files only: a leftover is no failure of the kit

    def py(self, *args: str) -> list[str]:
        return [sys.executable, *args]

    def steps(self) -> list[str]:
        return DRY_STEPS if self.dry else GPU_STEPS

    # ------------------------------------------------------------------ parts
    def part_tests(self, cap: float) -> dict:
        r = run_logged(self.py("-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "tests"), cap,
                       env=self.child_env)
        summary = next((ln for ln in reversed(r["log"]) if re.search(r"\d+ (passed|failed|skipped|error)", ln)), "")
        counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", summary)}
        status = "pass" if r["rc"] == 0 and counts.get("passed") else "fail"
        if self.dry or not self.env_info["cuda_available"]:
            status = "n/a (no CUDA)" if r["rc"] == 0 and not counts.get("failed") else "fail"
        return dict(r, status=status, figures={"summary": summary, **counts})

    def part_sync(self, cap: float) -> dict:
        path = self.scratch / "sync.json"
        r = run_logged(self.py("-m", "mc.app.gpu_step_check", "--json", str(path), f"preset={self.preset}",
                               *self.geometry, *compile_overrides()), cap, env=self.child_env)
        res = json.loads(path.read_text()) if path.is_file() and not r["timed_out"] else {}
        res.pop("overrides", None)
        return dict(r, status="pass" if r["rc"] == 0 and res.get("passed") else "fail", figures=res)

    def part_harness(self, cap: float) -> dict:
        verdict = self.run_dir / "harness" / "verdict.json"  # where the workflow's gate looks
        verdict.unlink(missing_ok=True)
        r = run_logged(self.py("scripts/mc_compile_harness.py", "--strict", "--json", str(verdict),
                               f"--preset={self.preset}", f"--name={self.name}", *FLAGS, *self.geometry, *self.steps(),
                               f"out_dir={self.run_dir.parent}"),
                       cap, env=self.child_env)
        v = json.loads(verdict.read_text()) if verdict.is_file() else {}
        keep = ("passed", "config_hash", "torch_version", "device", "recompiles_after_warmup", "graph_breaks", "cudagraph")
        figures = {k: v.get(k) for k in keep}
        figures["checks"] = {n: {"passed": c.get("passed"), "value": c.get("value"), "detail": str(c.get("detail"))[:300]}
                             for n, c in (v.get("checks") or {}).items()}
        return dict(r, status="pass" if r["rc"] == 0 and v.get("passed") else "fail", figures=figures)

    def part_bench(self, cap: float) -> dict:
        path = self.scratch / "bench.json"
        modes = ["reduce-overhead"] if self.dry else ["default", "reduce-overhead"]
        args = ["--quick", "train.device=cpu", "mc.bucket_ladder=[32]"] if self.dry else [f"preset={self.preset}",
                                                                                         *self.geometry]
        r = run_logged(self.py("scripts/mc_bench.py", "--json", str(path), "--modes", *modes, "--cases", *self.bench_cases,
                               "--reps", "3" if self.dry else "10", "--timeout", str(max(60.0, 0.4 * cap)),
                               *args), cap, env=self.child_env)
        res = json.loads(path.read_text()) if path.is_file() and not r["timed_out"] else {}
        rows = [{k: row.get(k) for k in ("case", "mode", "median_s", "ratio_to_eager", "first_call_cold_s",
                                         "first_call_warm_s", "graphs")} for row in res.get("rows", [])]
        figures = {"rows": rows, "cudagraph": res.get("cudagraph"), "errors": res.get("errors"),
                   "device_name": res.get("device_name"), "config": res.get("config")}
        return dict(r, status="pass" if r["rc"] == 0 and rows else "fail", figures=figures)

    def part_workflow(self, cap: float) -> dict:
        run_dir = self.run_dir
        for old in (run_dir.iterdir() if run_dir.is_dir() else ()):  # a fresh run; the harness verdict stays
            if old.name != "harness":
                shutil.rmtree(old) if old.is_dir() else old.unlink()
        r = run_logged(["bash", "mc_run.sh", f"--preset={self.preset}", f"--name={self.name}", *self.geometry,
                        *self.steps(), f"out_dir={run_dir.parent}"], cap, env=self.child_env)
        stages = stage_seconds(r["log"])
        gate = next((ln for ln in r["log"] if "gate:" in ln and ("reusing" in ln or "passed" in ln)), "")
        s2 = run_dir / "stage2" / "summary.json"
        summary = json.loads(s2.read_text()) if s2.is_file() else {}
        figures = {"stage_seconds": stages, "gate": gate.strip(), "report": str(run_dir / "report.md"),
                   "stage2": {k: summary.get(k) for k in ("steps", "sec_per_step", "seq_per_s", "lm_loss", "gap",
                                                          "pref_acc", "val_lm_loss")}}
        ok = r["rc"] == 0 and (run_dir / "report.md").is_file()
        return dict(r, status="pass" if ok else "fail", figures=figures)

    def part_overlap(self, cap: float) -> dict:
        out = self.scratch / "overlap"
        preset = ["preset=smoke", "data.source=recall"] if self.dry else ["preset=h100"]
        r = run_logged(self.py("scripts/mc_host_overlap.py", "--out", str(out), "--micro-steps",
                               "12" if self.dry else "30", *preset), cap, env=self.child_env)
        found = sorted(out.glob("*-host-overlap.json")) if out.is_dir() else []
        res = json.loads(found[-1].read_text()) if found else {}
        figures = {"geometry": res.get("geometry"), "breakdown_ms": res.get("host_work_breakdown_ms"),
                   "runs": [{"mode": x["mode"], "device_ms": x["device_ms"], "wait_mean_ms": x["wait"]["mean_ms"],
                             "wait_p95_ms": x["wait"]["p95_ms"], "step_ms": x["step_ms"]} for x in res.get("runs", [])]}
        return dict(r, status="pass" if r["rc"] == 0 and figures["runs"] else "fail", figures=figures)

    def part_smollm2(self, cap: float) -> dict:
        """SmolLM2-135M as the frozen base at GPU scale (``--preset h100_smollm2``, shortened): the carried GGUF
        joined into the model cache first (:mod:`mc.app.carry_model`), then stage 2, the held-out evaluation and
        the task suite inside and past the model's window. Dry run: ``--preset smollm2`` on the CPU."""
        from mc.app.carry_model import cached_gguf, default_spec  # noqa: PLC0415

        t0, joined = time.perf_counter(), ""
        if any((ROOT / ".carry").glob("model-*/model.json")):
            j = run_logged(self.py("-m", "mc.app.carry_model", "join"), min(cap, 180), env=self.child_env)
            if j["rc"] != 0:
                return dict(j, status="fail", figures={"join": j["log_tail"][-3:]})
            joined = (j["log_tail"] or [""])[-1]
        if not self.dry and cached_gguf(default_spec()) is None:
            return {"status": "n/a (SmolLM2 is not on this machine: carry it, obsidian Runbook 'GPU proof')",
                    "seconds": 0, "figures": {}, "log_tail": []}
        name = f"{self.name}-smollm2"
        run_dir = (self.scratch if self.dry else ROOT) / "runs" / name
        shutil.rmtree(run_dir, ignore_errors=True)
        geometry = DRY_SMOLLM2 if self.dry else GPU_SMOLLM2
        r = run_logged(["bash", "run10.sh", f"--name={name}", *geometry, f"out_dir={run_dir.parent}"],
                       cap - (time.perf_counter() - t0), env=self.child_env)
        ev_path, s2 = run_dir / "eval" / "eval.json", run_dir / "stage2" / "summary.json"
        ev = json.loads(ev_path.read_text()) if ev_path.is_file() else {}
        summary = json.loads(s2.read_text()) if s2.is_file() else {}
        tasks: dict[str, list[float]] = {}
        for c in (ev.get("tasks") or {}).get("cells", []):
            tasks.setdefault(f"{c['task']} {c['multiple']}x {c['variant']}", []).append(c["score"])
        figures = {"joined": joined, "preset": geometry[0],
                   "stage_seconds": stage_seconds(r["log"]),
                   "stage2": {k: summary.get(k) for k in ("steps", "sec_per_step", "lm_loss", "val_lm_loss")},
                   **{m: {v: round(x["mean"], 4) for v, x in (ev.get("metrics") or {}).get(m, {}).items()}
                      for m in ("corpus_tail_loss", "corpus_stream_loss")},
                   "tasks_mean_over_depths": {k: round(sum(v) / len(v), 3) for k, v in tasks.items()}}
        ok = r["rc"] == 0 and (run_dir / "report.md").is_file() and bool(tasks)
        if ok:
            figures["decode_tok_s"] = self._decode_rates(run_dir, cap - (time.perf_counter() - t0))
        return dict(r, status="pass" if ok else "fail", figures=figures)

    def _decode_rates(self, run_dir: Path, cap: float) -> dict:
        """``mc_generate.py --json`` on the trained run, with the KV cache and without: decode tokens/s each
        (the cache must never be the slower way; obsidian Inference, "Decode on a GPU"). None where it failed."""
        rates = {}
        for label, flags in (("no_kv_cache", ["--no-kv-cache"]), ("kv_cache", [])):
            rec = self.scratch / f"generate-{label}.json"
            g = run_logged(self.py("scripts/mc_generate.py", "--run-dir", str(run_dir), "--prompt", DECODE_PROMPT,
                                   "--max-new-tokens", "64" if not self.dry else "8", "--json", str(rec), *flags),
                           max(cap / 2, 1.0), env=self.child_env, tail=3)
            ok = g["rc"] == 0 and rec.is_file()
            rates[label] = round(json.loads(rec.read_text())["decode_tokens_per_s"], 2) if ok else None
            cap -= g["seconds"]
        return rates

    # ------------------------------------------------------------------ driver
    def run_part(self, part: str) -> dict:
        left = self.deadline - time.monotonic() - 5
        cap = min(self.caps[part], left)
        print(f"\n[gpu-check] ===== {part} (cap {cap:.0f} s, {max(left, 0):.0f} s of the budget left) =====", flush=True)
        if cap < MIN_USEFUL_S:
            res = {"status": "not run (time budget spent)", "seconds": 0, "figures": {}, "log_tail": []}
        else:
            res = getattr(self, f"part_{part}")(cap)
            if res.get("timed_out"):
                res["status"] = f"timeout (cap {cap:.0f} s)"
        res.pop("log", None)
        res.update(part=part, cap_s=round(cap), env=self.env_info)
        path = self.out / "parts" / f"{part}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps(res, indent=1, default=str) + "\n")
        print(f"[gpu-check] {part}: {res['status']} ({res['seconds']} s)", flush=True)
        return res


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bash scripts/gpu_check.sh", description=__doc__.split("\n\n")[0])
    p.add_argument("--dry-run", action="store_true", help="tiny shapes on the CPU (CUDA checks n/a), into a temp folder")
    p.add_argument("--part", default="all", help=f"comma list of {', '.join(PARTS + OPT_IN_PARTS)} (default all: "
                   f"{', '.join(PARTS)}, in that order)")
    p.add_argument("--out", type=Path, default=None, help="output folder (default bench/results; dry run: a temp folder)")
    p.add_argument("--budget-min", type=float, default=25.0, help="wall-clock budget for this call (default 25)")
    p.add_argument("--cap", action="append", default=[], metavar="PART=S", help="override one part's cap (seconds)")
    p.add_argument("--report-only", action="store_true", help="rebuild the report from OUT/parts/*.json, run nothing")
    p.add_argument("--bench-cases", nargs="+", default=["lensnet", "train", "tree"], choices=["lensnet", "train", "tree"],
                   help="bench case groups (default all; the test suite's dry run times lensnet only)")
    a = p.parse_args(argv)
    parts = list(PARTS) if a.part == "all" else [x.strip() for x in a.part.split(",") if x.strip()]
    bad = [x for x in parts if x not in PARTS + OPT_IN_PARTS]
    if bad or not parts:
        p.error(f"--part: unknown part(s) {bad or a.part!r}; parts are {', '.join(PARTS + OPT_IN_PARTS)} or all")
    caps = dict(DRY_CAPS_S if a.dry_run else CAPS_S)
    for item in a.cap:
        name, _, val = item.partition("=")
        if name not in PARTS + OPT_IN_PARTS or not val.replace(".", "", 1).isdigit():
            p.error(f"--cap {item!r}: expected PART=SECONDS with PART one of {', '.join(PARTS + OPT_IN_PARTS)}")
        caps[name] = float(val)
    results_dir = (ROOT / "bench" / "results").resolve()
    out = a.out or (Path(tempfile.mkdtemp(prefix="mc-gpu-check-")) if a.dry_run else results_dir)
    if a.dry_run and out.resolve().is_relative_to(results_dir):
        p.error("--dry-run writes CPU plumbing numbers: give --out a folder outside bench/results (default: a temp folder)")
    out.mkdir(parents=True, exist_ok=True)
    if not a.report_only:
        kit = Kit(a.dry_run, out, a.budget_min * 60, caps, a.bench_cases)
        if not a.dry_run and not kit.env_info["cuda_available"]:
            kit.finish([])
            print("gpu_check: error: torch sees no CUDA device here; run on a GPU machine, or use --dry-run", file=sys.stderr)
            return 2
        statuses = {}
        try:
            for part in parts:
                statuses[part] = str(kit.run_part(part)["status"])
                write_report(out)
        finally:  # an interrupted kit keeps its scratch too: the part it stopped in has no status
            kit.finish([p for p in parts if not part_ok(statuses.get(p, ""))])
    paths = write_report(out)
    if paths is None:
        print(f"gpu_check: error: no part results in {out / 'parts'}", file=sys.stderr)
        return 2
    failed = [json.loads(f.read_text())["part"] for f in sorted((out / "parts").glob("*.json"))
              if not part_ok(json.loads(f.read_text())["status"])]
    print(f"[gpu-check] report: {paths[0]} and {paths[1].name}" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
