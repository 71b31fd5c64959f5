"""Bench: MegaContext decoding on a real ``model=hf`` reader against transformers' own ``generate``.

Owns the comparison a user would make before adopting the project (``scripts/mc_bench_reader.py``;
obsidian Inference, "Against transformers"): the same model, the same prompt, greedy, each with
its cache, in one process, round-robin (MegaContext then transformers, ``--reps`` times), in two cases:

* ``in_window``: a short real-text prompt whose history (prompt + new tokens) stays inside the
  working context, so MegaContext reads every token at LOD0, as transformers does. Its greedy
  tokens should equal transformers' (reported as ``same_tokens``).
* ``long``: a ``--long-tokens`` history (16k by default): transformers attends over all of it;
  MegaContext reads a fixed-size working context of tokens and gists.

Per system and case: time to first token (prompt in, first new token out: MegaContext's session
build, gisting and prefill; transformers' prefill), decode tokens/s over the remaining tokens
(MegaContext's refocuses included: a user waits for them), and the ratios MegaContext /
transformers. Peak memory: what a run added at its peak over what the process held before it (the
loaded model): on CUDA ``max_memory_allocated`` in the timed runs; on Linux CPUs the resident set's
high-water mark (reset through ``/proc/self/clear_refs``) in a fresh process per (system, case) that
loads only that system, since in one process memory freed by another run is reused without growing it.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path
from typing import Sequence

import torch

from mc.io import write_results

CASES = ("in_window", "long")
SYSTEMS = ("megacontext", "transformers")


class _Clock:
    """Token timestamps: ``t[0]`` the start, then one per new token (transformers' streamer or ``on_token``)."""

    def __init__(self) -> None:
        self.t: list[float] = []
        self._prompt_seen = False

    def start(self) -> None:
        self.t, self._prompt_seen = [time.perf_counter()], False

    def token(self, *_args) -> None:
        self.t.append(time.perf_counter())

    def put(self, value) -> None:  # transformers' streamer protocol: the first put is the prompt
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        self.token()

    def end(self) -> None:
        pass

    def result(self, n_new: int) -> dict:
        if len(self.t) != n_new + 1:
            raise RuntimeError(f"expected {n_new} token timestamps, got {len(self.t) - 1}")
        ttft = self.t[1] - self.t[0]
        decode = (n_new - 1) / max(self.t[-1] - self.t[1], 1e-9)
        return {"ttft_s": ttft, "decode_tokens_per_s": decode}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _rss_mb(field: str) -> float | None:
    """``VmRSS`` / ``VmHWM`` of this process in MB (Linux), else None."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _peak_reset(device: torch.device) -> float | None:
    """Start a peak-memory window; returns the baseline (MB) the peak is measured from."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        return torch.cuda.memory_allocated() / 2**20
    try:  # Linux: writing 5 resets the resident-set high-water mark (VmHWM) to the current RSS
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return None
    return _rss_mb("VmRSS")


def _peak_mb(device: torch.device, base: float | None) -> float | None:
    """Memory the run added at its peak over ``base`` (CUDA: allocated; CPU: resident set), MB."""
    if base is None:
        return None
    peak = torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else _rss_mb("VmHWM")
    return None if peak is None else peak - base


def prompt_text(n_tokens: int, tok) -> list[int]:
    """``n_tokens`` ids of real text (standard-library sources, the project's default corpus), repeated as needed."""
    from mc.data.stdlib_corpus import stdlib_files  # noqa: PLC0415

    ids: list[int] = []
    for path in stdlib_files():
        ids += tok.encode_body(Path(path).read_text(encoding="utf-8", errors="replace"))
        if len(ids) >= n_tokens:
            break
    return ids[:n_tokens]


def run_megacontext(ctrl, prompt: list[int], n_new: int, device: torch.device) -> dict:
    clock = _Clock()
    ctrl.session = ctrl.decoder = None  # the previous run's session and cache are not this run's memory
    base = _peak_reset(device)
    _sync(device)
    clock.start()
    ctrl.begin_session(torch.tensor(prompt, dtype=torch.long, device=device))
    out = ctrl.generate(n_new, on_token=clock.token)  # greedy, KV cache, refocus on schedule
    _sync(device)
    return {**clock.result(n_new), "tokens": out.tolist(), "peak_mb": _peak_mb(device, base),
            "entries": len(ctrl.session.wc.entries), "history": ctrl.session.num_tokens}


@torch.no_grad()
def run_transformers(model, prompt: list[int], n_new: int, device: torch.device) -> dict:
    clock = _Clock()
    ids = torch.tensor([prompt], dtype=torch.long, device=device)
    base = _peak_reset(device)
    _sync(device)
    clock.start()
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n_new, min_new_tokens=n_new,
                         do_sample=False, streamer=clock, pad_token_id=model.generation_config.pad_token_id)
    _sync(device)
    return {**clock.result(n_new), "tokens": out[0, ids.shape[1]:].tolist(), "peak_mb": _peak_mb(device, base)}


def _load(cfg_overrides: Sequence[str], run_dir: Path | None, device: torch.device, *, systems=SYSTEMS):
    """The MegaContext controller (a trained run, or fresh aux nets over the configured reader), its tokenizer,
    and transformers' model of the same reader; a system not in ``systems`` is None (only its config is read)."""
    from transformers import AutoModelForCausalLM  # noqa: PLC0415

    from mc.build import build_controller, load_run  # noqa: PLC0415
    from mc.config import RunConfig, from_dict  # noqa: PLC0415
    from mc.config_loading import load_config  # noqa: PLC0415
    from mc.data.hf_tokenizer import tokenizer_for  # noqa: PLC0415
    from mc.nets.hf_load import model_dir  # noqa: PLC0415

    ctrl = None
    if run_dir is not None:
        cfg = from_dict(RunConfig, json.loads((Path(run_dir) / "config.json").read_text(encoding="utf-8")))
        if "megacontext" in systems:
            ctrl, _ = load_run(run_dir, device=device)
    else:
        cfg = load_config(list(cfg_overrides))
        if "megacontext" in systems:
            ctrl = build_controller(cfg, device=device)
    if cfg.model.source != "hf":
        raise ValueError("the reader bench compares against transformers: it needs a model=hf run or config")
    m = cfg.model
    model = None
    if "transformers" in systems:
        model = AutoModelForCausalLM.from_pretrained(str(model_dir(m.hf_path)), dtype=getattr(torch, m.hf_dtype),
                                                     local_files_only=True, attn_implementation="sdpa").to(device).eval()
    return cfg, ctrl, tokenizer_for(m), model


def memory_probe(args) -> dict:
    """One (system, case) in a fresh process that loads only that system (CPU): the resident set's peak over
    what the process held after loading and a short warm-up run, so memory other runs freed cannot hide it."""
    device = torch.device(args.device)
    _, ctrl, tok, model = _load(args.overrides, args.run_dir, device, systems=(args.memory_probe,))
    run = ((lambda p, n: run_megacontext(ctrl, p, n, device)) if ctrl is not None
           else (lambda p, n: run_transformers(model, p, n, device)))
    run(prompt_text(args.in_window_tokens, tok), 4)
    return {"peak_mb": run(prompt_text(_lengths(args)[args.case], tok), args.new_tokens)["peak_mb"]}


def _probe_subprocess(args, system: str, case: str) -> float | None:
    cmd = [sys.executable, "-m", "mc.app.bench_reader", "--memory-probe", system, "--case", case,
           "--device", args.device, "--new-tokens", str(args.new_tokens),
           "--in-window-tokens", str(args.in_window_tokens), "--long-tokens", str(args.long_tokens)]
    cmd += ["--run-dir", str(args.run_dir)] if args.run_dir else []
    done = subprocess.run(cmd + list(args.overrides), capture_output=True, text=True, check=False)
    if done.returncode != 0:  # the table says n/a, and why is on stderr
        print(f"[bench] memory probe {system}/{case} failed: {done.stderr.strip()[-300:]}", file=sys.stderr)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])["peak_mb"]


def _lengths(args) -> dict[str, int]:
    return {"in_window": args.in_window_tokens, "long": args.long_tokens}


def run_bench(args) -> dict:
    device = torch.device(args.device)
    cfg, ctrl, tok, model = _load(args.overrides, args.run_dir, device)
    results: dict = {"cases": {}}
    warm = prompt_text(args.in_window_tokens, tok)  # first calls (allocations, lazy set-up) are nobody's cost
    run_megacontext(ctrl, warm, 4, device)
    run_transformers(model, warm, 4, device)
    for case, length in _lengths(args).items():
        prompt = prompt_text(length, tok)
        runs = {s: [] for s in SYSTEMS}
        for rep in range(args.reps):  # round-robin: both systems see the same machine state
            for system in SYSTEMS:
                r = (run_megacontext(ctrl, prompt, args.new_tokens, device) if system == "megacontext"
                     else run_transformers(model, prompt, args.new_tokens, device))
                runs[system].append(r)
                print(f"[bench] {case} rep {rep + 1}/{args.reps} {system}: ttft {r['ttft_s']:.2f} s, "
                      f"decode {r['decode_tokens_per_s']:.2f} tok/s", file=sys.stderr, flush=True)
        summary = {s: {"ttft_s": statistics.median(r["ttft_s"] for r in rs),
                       "decode_tokens_per_s": statistics.median(r["decode_tokens_per_s"] for r in rs),
                       "peak_mb": max((r["peak_mb"] for r in rs if r["peak_mb"] is not None), default=None),
                       "runs": rs} for s, rs in runs.items()}
        mc_, tf_ = summary["megacontext"], summary["transformers"]
        results["cases"][case] = {
            "history_tokens": length + args.new_tokens, "prompt_tokens": length, "new_tokens": args.new_tokens,
            "entries_read": runs["megacontext"][-1]["entries"], **summary,
            "ttft_speedup": tf_["ttft_s"] / max(mc_["ttft_s"], 1e-9),
            "decode_ratio": mc_["decode_tokens_per_s"] / max(tf_["decode_tokens_per_s"], 1e-9),
            "same_tokens": runs["megacontext"][-1]["tokens"] == runs["transformers"][-1]["tokens"]}
    if device.type == "cpu" and not args.no_memory:  # in-process, freed memory is reused: one process per probe
        for case in CASES:
            for system in SYSTEMS:
                results["cases"][case][system]["peak_mb"] = _probe_subprocess(args, system, case)
    results["setup"] = {"device": _device_name(device), "device_type": device.type, "torch": torch.__version__, "transformers": _tf_version(),
                        "threads": torch.get_num_threads(), "date": date.today().isoformat(), "reps": args.reps,
                        "model": cfg.model.hf_path, "hf_dtype": cfg.model.hf_dtype, "run_dir": str(args.run_dir or ""),
                        "max_entries": cfg.mc.max_entries, "block_size": cfg.mc.block_size,
                        "refocus_interval": cfg.allocator.inference.refocus_interval}
    return results


def _device_name(device: torch.device) -> str:
    from mc.app.bench import device_name  # noqa: PLC0415

    return device_name(str(device))


def _tf_version() -> str:
    import transformers  # noqa: PLC0415

    return transformers.__version__


def to_markdown(res: dict) -> str:
    s = res["setup"]
    lines = [f"# MegaContext vs transformers generate on {s['model']}", "",
             f"{s['date']}; device {s['device']}, {s['threads']} threads; torch {s['torch']}, transformers "
             f"{s['transformers']}; {s['hf_dtype']}; greedy, each with its cache; round-robin, median of {s['reps']}; "
             f"working context {s['max_entries']} entries, K={s['block_size']}, refocus every {s['refocus_interval']} tokens.",
             "", "Peak memory: what the run added at its peak over the memory held before it (the loaded model; on a CPU, measured in a fresh process per system and case).", "",
             "| case | history | entries read | system | time to first token | decode tok/s | peak memory added |",
             "|---|---|---|---|---|---|---|"]
    for case, c in res["cases"].items():
        for system in SYSTEMS:
            r = c[system]
            mem = r.get("peak_mb")
            kind = "CUDA allocated" if s["device_type"] == "cuda" else "resident set"
            lines.append(f"| {case} | {c['history_tokens']} | {c['entries_read'] if system == 'megacontext' else c['history_tokens']} "
                         f"| {system} | {r['ttft_s']:.2f} s | {r['decode_tokens_per_s']:.2f} | "
                         + (f"{mem:.0f} MB ({kind})" if mem is not None else "n/a") + " |")
        lines.append(f"| {case} | | | **MegaContext / transformers** | **{c['ttft_speedup']:.1f}x faster** | "
                     f"**{c['decode_ratio']:.2f}x** | same greedy tokens: {'yes' if c['same_tokens'] else 'no'} |")
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mc_bench_reader.py", description=__doc__.splitlines()[0])
    p.add_argument("--run-dir", type=Path, default=None, help="a trained model=hf run (default: fresh aux nets over the config)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--reps", type=int, default=2, help="round-robin repetitions per case (median reported)")
    p.add_argument("--new-tokens", type=int, default=32, help="greedy tokens per run (default 32)")
    p.add_argument("--in-window-tokens", type=int, default=24, help="prompt of the in_window case (default 24)")
    p.add_argument("--long-tokens", type=int, default=16384, help="prompt of the long case (default 16384)")
    p.add_argument("--no-memory", action="store_true", help="CPU: skip the peak-memory probes (a fresh process each)")
    p.add_argument("--memory-probe", choices=SYSTEMS, default=None, help=argparse.SUPPRESS)
    p.add_argument("--case", choices=CASES, default="long", help=argparse.SUPPRESS)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--md", type=Path, default=None)
    p.add_argument("overrides", nargs="*", help="config overrides without --run-dir (default: preset=smollm2)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.run_dir is None and not args.overrides:
        args.overrides = ["preset=smollm2"]
    if args.memory_probe:
        print(json.dumps(memory_probe(args)))
        return 0
    res = run_bench(args)
    write_results(res, to_markdown(res), json_path=args.json, md_path=args.md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
