"""The compile harness: proves, on one resolved config, that turning compile on is safe.

``run_harness(cfg)`` builds the REAL controller (``mc.build.build_controller``: the same nets,
helpers and compiled boundary the workflow trains), runs ``controller.warmup()``, then a steady
state that exercises every compiled call site the way training and inference do:

1. training rounds: ``max(2, train.stage2.grad_accum)`` micro-steps with backward and gradient
   accumulation, then an optimizer step (the eager twin runs the same first round for parity);
2. an inference session: a prompt longer than the working context (GistNet calls through tree
   appends at every level), then several appends that each trigger a refocus (allocator-style
   repeated LensNet calls), an explicit refocus and the next-token logits;
3. the poison test: helper outputs from call A are kept while calls B, C, D run (C has A's shape,
   so under CUDA graphs it replays A's graph), then compared with a copy taken right after A; and
   each returned tensor must not share storage with the raw compiled output (``RawSpy``);
4. a second identical round, between which device memory must stay flat (CUDA).

Every check is reported with its numbers in a verdict dict (fields listed in :func:`run_harness`);
``main`` is the CLI behind ``scripts/mc_compile_harness.py``. Test hooks, used only to prove the
harness can fail: ``inject="recompile"`` (a call at an unwarmed shape after warm-up) and
``inject="alias"`` (LensNet's helper skips its clone); also via env ``MC_HARNESS_INJECT``.
"""
from __future__ import annotations

import copy
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from mc.config import ConfigError, RunConfig, to_dict
from mc.config_loading import COMPILE_FLAGS, load_config, parse_workflow_args
from mc.harness.checks import (RawSpy, build_verdict, cuda_memory, format_table, grads_of, make_mwc, max_rel_err,
                               recompile_guards, worst_grad_err)

INJECTIONS = ("recompile", "alias")
INJECT_ENV = "MC_HARNESS_INJECT"
SCORE_TOL = 1e-3  # max |compiled - eager| / max |eager| (fp32; Inductor reorders reductions)
GRAD_TOL = 2e-3  # the same for accumulated gradients
MEMORY_TOL_BYTES = 4 << 20  # allowed growth of allocated / reserved CUDA memory between rounds
N_REFOCUS = 6  # appends (each triggering a refocus) per inference round
CHECK_NAMES = ("no_exception", "recompiles_after_warmup", "graph_breaks", "cudagraphs", "held_outputs",
               "eager_parity", "finite", "memory_flat", "compile_time", "coverage")


def compile_modes(cfg: RunConfig) -> dict[str, str]:
    c = cfg.compile
    return {f"{net}.{ctx}": getattr(getattr(c, net), ctx) for net in ("lensnet", "gistnet") for ctx in ("train", "inference")}


def _eager_cfg(cfg: RunConfig) -> RunConfig:
    out = copy.deepcopy(cfg)
    for net in (out.compile.lensnet, out.compile.gistnet):
        net.train = net.inference = "off"
    return out


class _Harness:
    """State of one harness run; each phase is a method wrapped by :meth:`phase`."""

    def __init__(self, cfg: RunConfig, *, strict: bool, base_weights: str | None, inject: str | None,
                 compile_budget_s: float, log: Callable[[str], None]) -> None:
        from mc.build import resolve_device  # noqa: PLC0415 - keeps `import mc.harness.run` light

        if inject not in (None, *INJECTIONS):
            raise ValueError(f"inject={inject!r}: expected one of {', '.join(INJECTIONS)} (or None)")
        self.cfg, self.strict, self.base_weights, self.inject, self.log = cfg, strict, base_weights, inject, log
        self.compile_budget_s = compile_budget_s
        self.device = resolve_device(cfg.train.device)
        self.modes = compile_modes(cfg)
        self.errors: list[dict] = []
        self.recompile_errors: list[str] = []
        self.tracked: list[tuple[str, torch.Tensor]] = []
        self.held: list[dict] = []  # {"what", "changed", "aliased", "max_abs_diff"}
        self.parity: dict[str, tuple[float, str]] = {}
        self.memory: dict[str, Any] = {}
        self.counts = {"train_micro_steps": 0, "optimizer_steps": 0, "refocuses": 0}
        self.timings: dict[str, float] = {}
        self.notes: list[str] = []
        self.data_gen = torch.Generator().manual_seed(cfg.train.seed)
        self.ctl = self.twin = self.spy = self.opt = self.telemetry = None
        self._strict_ctx = None

    # ------------------------------------------------------------------ plumbing
    def phase(self, name: str, fn: Callable[[], Any]) -> bool:
        """Run one phase; an exception is recorded with its text (CUDA-graph errors included)."""
        t0 = time.perf_counter()
        self.log(f"[harness] {name} ...")
        try:
            fn()
            return True
        except Exception as exc:  # noqa: BLE001 - every failure becomes a named, reported check
            text = f"{type(exc).__name__}: {exc}"
            guards = recompile_guards(text)
            if guards:
                self.recompile_errors.append(f"[{name}] {guards}")
            self.errors.append({"phase": name, "type": type(exc).__name__, "error": text[:4000]})
            self.log(f"[harness] {name} raised {text.splitlines()[0][:300]}")
            return False
        finally:
            self.timings[name] = round(time.perf_counter() - t0, 3)

    def track(self, name: str, t: torch.Tensor) -> None:
        self.tracked.append((name, t.detach()))

    def held_result(self, what: str, kept: torch.Tensor, copy_: torch.Tensor, aliased: bool) -> None:
        diff = float((kept.detach().float() - copy_.float()).abs().max()) if kept.numel() else 0.0
        self.held.append({"what": what, "changed": not torch.equal(kept.detach(), copy_), "aliased": aliased,
                          "max_abs_diff": diff})

    # ------------------------------------------------------------------ phases
    def build(self) -> None:
        from mc.build import build_controller  # noqa: PLC0415
        from mc.compile.boundary import strict_cudagraphs  # noqa: PLC0415
        from mc.compile.telemetry import Telemetry  # noqa: PLC0415

        if self.strict or self.cfg.compile.cudagraph_strict:
            if self.device.type == "cuda":
                self._strict_ctx = strict_cudagraphs()
                if self._strict_ctx.missing:
                    self.notes.append(f"strict mode incomplete: this torch lacks {', '.join(self._strict_ctx.missing)}")
            else:
                self.notes.append("strict CUDA-graph mode applies to CUDA only; ignored on " + self.device.type)
        self.telemetry = Telemetry(device=self.device).start()  # before any compile, so every event is seen
        self.ctl = build_controller(self.cfg, device=self.device, base_weights=self.base_weights,
                                    telemetry=self.telemetry)

    def warmup(self) -> None:
        t0 = time.perf_counter()
        self.ctl.warmup(torch.Generator().manual_seed(self.cfg.train.seed))
        self.timings["warmup_wall_s"] = round(time.perf_counter() - t0, 3)
        self.spy = RawSpy(self.ctl).install()
        self.opt = torch.optim.AdamW(self.ctl.aux_parameters(), lr=self.cfg.train.stage2.lr)
        if self.inject == "alias":  # test hook: LensNet's helper hands out the raw compiled output
            self.ctl.compiled_lensnet.clone_outputs = lambda out, *, context: out

    def build_twin(self) -> None:
        from mc.build import build_controller  # noqa: PLC0415
        from mc.compile.telemetry import Telemetry  # noqa: PLC0415

        self.twin = build_controller(_eager_cfg(self.cfg), device=self.device, telemetry=Telemetry(device=self.device))
        self.sync_twin()

    def sync_twin(self) -> None:
        for name in ("base", "gistnet", "lensnet"):
            getattr(self.twin, name).load_state_dict(getattr(self.ctl, name).state_dict())

    def train_round(self, *, parity: bool) -> None:
        c, cfg = self.ctl, self.cfg
        n_micro = max(2, cfg.train.stage2.grad_accum)
        b, t = cfg.train.stage2.batch_size, cfg.mc.history_tokens
        ids = [torch.randint(0, 256, (b, t), generator=self.data_gen) for _ in range(n_micro)]
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=self.data_gen))
        c.zero_grad(self.opt)
        gen = torch.Generator().manual_seed(seed)
        scores, kept = [], None
        for m, x in enumerate(ids):
            out = c.train_step(x, gen)
            if self.spy.aliased("lensnet", out.scores):
                self.held.append({"what": f"lensnet/train scores micro-step {m}", "changed": False, "aliased": True,
                                  "max_abs_diff": 0.0})
            if m == 0:  # poison: kept across the next micro-steps (same shape: the same graph replays)
                kept = (out.scores, out.scores.detach().clone())
            (out.total / n_micro).backward()
            c.end_micro_step()
            scores.append(out.scores.detach().clone())
            for k, v in (("total", out.total), ("lm_loss", out.lm_loss), ("scores", out.scores),
                         ("preference", out.preference.loss)):
                self.track(f"train.{k}[{m}]", v)
        self.held_result("lensnet/train scores of micro-step 0 after later micro-steps", kept[0], kept[1], False)
        grads = {**grads_of(c.gistnet, "gistnet"), **grads_of(c.lensnet, "lensnet")}
        for k, g in grads.items():
            self.track(f"grad.{k}", g)
        if parity:
            self.sync_twin()
            gen_e = torch.Generator().manual_seed(seed)
            for p in self.twin.aux_parameters():
                p.grad = None
            worst = (0.0, "-")
            for m, x in enumerate(ids):
                out_e = self.twin.train_step(x, gen_e)
                (out_e.total / n_micro).backward()
                self.twin.end_micro_step()
                err = max_rel_err(scores[m], out_e.scores)
                worst = max(worst, (err, f"micro-step {m}"))
            self.parity["train scores"] = worst
            ref = {**grads_of(self.twin.gistnet, "gistnet"), **grads_of(self.twin.lensnet, "lensnet")}
            self.parity["accumulated grads"] = worst_grad_err(grads, ref)
        self.opt.step()
        self.counts["train_micro_steps"] += n_micro
        self.counts["optimizer_steps"] += 1

    def inference_round(self) -> None:
        c, mc, inf = self.ctl, self.cfg.mc, self.cfg.allocator.inference
        prompt_len = 2 * mc.max_entries + mc.block_size ** mc.max_lod  # longer than the WC, gists at every LOD
        s = c.begin_session(torch.randint(0, 256, (prompt_len,), generator=self.data_gen))
        for _ in range(N_REFOCUS):  # each append reaches refocus_interval: one refocus each
            c.append(torch.randint(0, 256, (inf.refocus_interval,), generator=self.data_gen))
        c.refocus()
        self.track("inference.next_token_logits", c.next_token_logits())
        s.wc.validate()
        self.counts["refocuses"] += len(s.refocus_log)

    def held_outputs(self) -> None:
        """Poison test at inference (both nets): keep A, run B, C (A's shape), D; A must not change."""
        c, mc, d = self.ctl, self.cfg.mc, self.cfg.model.d_model
        g = torch.Generator().manual_seed(self.cfg.train.seed + 1)
        lad, glad = mc.bucket_ladder, mc.gist_bucket_ladder
        self.sync_twin()
        for net, sizes in (("lensnet", [lad[0], lad[-1], lad[0], lad[len(lad) // 2]]),
                           ("gistnet", [glad[0], glad[-1], glad[0], glad[len(glad) // 2]])):
            kept = snap = first_in = None
            for i, size in enumerate(sizes):
                if net == "lensnet":
                    x = make_mwc(size, min(size, mc.max_entries), d, device=self.device, generator=g, max_lod=mc.max_lod)
                    out = c.lensnet_scores(x, 4 * size)
                else:
                    x = torch.randn(size, mc.block_size, d, generator=g).to(self.device)
                    out = c.gist_blocks(x)
                self.track(f"{net}/inference call {'ABCD'[i]}", out)
                if self.spy.aliased(net, out):
                    self.held.append({"what": f"{net}/inference call {'ABCD'[i]}", "changed": False, "aliased": True,
                                      "max_abs_diff": 0.0})
                if i == 0:
                    kept, snap, first_in = out, out.detach().clone(), x
            self.held_result(f"{net}/inference output A after calls B, C, D", kept, snap, False)
            with torch.no_grad():  # eager parity of the same call A
                ref = (self.twin.lensnet_scores(first_in, 4 * sizes[0]) if net == "lensnet"
                       else self.twin.gist_blocks(first_in))
            self.parity[f"{net} inference"] = (max_rel_err(snap, ref), "call A")

    def inject_recompile(self) -> None:
        """Test hook: one call at a shape warm-up never saw (must be reported as a recompile)."""
        c, mc, d = self.ctl, self.cfg.mc, self.cfg.model.d_model
        g = torch.Generator().manual_seed(7)
        if self.modes["lensnet.inference"] != "off":
            size = next(n for n in range(mc.bucket_ladder[0] + 1, 10**6) if n not in mc.bucket_ladder)
            c.lensnet_scores(make_mwc(size, min(size, mc.max_entries), d, device=self.device, generator=g), size)
        elif self.modes["gistnet.inference"] != "off":
            n = next(n for n in range(2, 10**6) if n not in mc.gist_bucket_ladder)
            with torch.no_grad():
                c.compiled_gistnet.run(torch.randn(n, mc.block_size, d, device=self.device), context="inference")
        elif any(mode != "off" for key, mode in self.modes.items() if key.endswith(".train")):
            ids = torch.randint(0, 256, (self.cfg.train.stage2.batch_size + 1, mc.history_tokens), generator=g)
            c.train_step(ids, g).total.backward()
            c.end_micro_step()
        else:
            raise ValueError("inject=recompile needs at least one compiled net/context (every compile mode is off)")

    # ------------------------------------------------------------------ the run
    def run(self) -> dict:
        t0 = time.perf_counter()
        try:
            ok = self.phase("build", self.build) and self.phase("warmup", self.warmup)
            if ok:
                twin_ok = self.phase("eager_twin", self.build_twin)
                self.phase("train_round_1", lambda: self.train_round(parity=twin_ok))
                self.phase("inference_round_1", self.inference_round)
                if twin_ok:
                    self.phase("held_outputs", self.held_outputs)
                self.memory["baseline"] = cuda_memory(self.device)
                self.phase("train_round_2", lambda: self.train_round(parity=False))
                self.phase("inference_round_2", self.inference_round)
                self.memory["end"] = cuda_memory(self.device)
                if self.inject == "recompile":
                    self.phase("inject_recompile", self.inject_recompile)
            return self.verdict(ok, time.perf_counter() - t0)
        finally:
            self.cleanup()

    def cleanup(self) -> None:
        from mc.compile.boundary import unfreeze  # noqa: PLC0415

        if self.spy is not None:
            self.spy.uninstall()
        if self.ctl is not None:
            self.ctl.compiled_lensnet.__dict__.pop("clone_outputs", None)
        unfreeze(self.telemetry.monitor if self.telemetry is not None else None)
        if self._strict_ctx is not None:
            self._strict_ctx.restore()
        if self.telemetry is not None:
            self.telemetry.monitor.stop()
            self.telemetry.close()

    # ------------------------------------------------------------------ verdict
    def verdict(self, warmed: bool, wall_s: float) -> dict:
        return build_verdict(self, warmed, wall_s)


def run_harness(cfg: RunConfig, *, strict: bool = False, base_weights: str | None = None, inject: str | None = None,
                compile_budget_s: float = 0.0, log: Callable[[str], None] = print) -> dict:
    """Run the harness on ``cfg`` as resolved (nothing is shrunk) and return the verdict.

    Verdict: ``passed``, ``config_hash`` (:func:`mc.config_loading.compile_hash`), ``torch_version``,
    ``device``, ``recompiles_after_warmup``, ``graph_breaks``, ``cudagraph`` {``status``,
    ``recordings_warmup``, ``recordings_steady``, ``skips``}, ``checks`` {name: {``passed``,
    ``value``, ``detail``}} for every name in :data:`CHECK_NAMES`, and ``info`` (modes, timings,
    compile summaries, notes). Run it in a fresh process per config: Dynamo state is global.
    """
    return _Harness(cfg, strict=strict, base_weights=base_weights, inject=inject, compile_budget_s=compile_budget_s,
                    log=log).run()


# ============================================================================ CLI
USAGE = """\
usage: python scripts/mc_compile_harness.py [--json PATH] [--strict] [--base-weights PATH]
                                            [--compile-budget SECONDS] [--inject recompile|alias]
                                            [run10 flags] [key=value ...]

Proves that the resolved config is safe to run compiled: builds the real controller, warms it
up, then trains (>= 2 accumulated micro-steps + an optimizer step), runs an inference session
with refocuses and GistNet tree appends, and checks: no exception, 0 recompiles after warm-up,
0 graph breaks, CUDA graphs recorded in warm-up only (n/a on CPU), held outputs unchanged and
never aliased, eager parity of scores and gradients, finite values, flat CUDA memory, compile
time. Prints a table; exit 0 iff every check passes.

Which nets are compiled: the run10 flags (--mc_compile_lensnet=1, --mc_compile_lensnet_inference=1,
--mc_compile_gistnet=1, --compile_mode MODE) or compile.* overrides, as in the workflow. With no
compile flag and a config that compiles nothing, the harness turns on what mc_run.sh turns on:
reduce-overhead for LensNet train + inference and GistNet.

  --json PATH            write the verdict JSON there
  --strict               CUDA: triton.cudagraph_or_error + no graph partition (a skip raises)
  --base-weights PATH    stage-1 weights for the base model (default: fresh weights)
  --compile-budget S     fail the compile_time check above S seconds (default: report only)
  --inject KIND          test hook proving the harness can fail: "recompile" (a call at an unwarmed
                         shape after warm-up) or "alias" (LensNet's helper skips its clone);
                         also env MC_HARNESS_INJECT
examples:
  python scripts/mc_compile_harness.py --json v.json
  python scripts/mc_compile_harness.py --preset smoke --mc_compile_lensnet_inference=1
  TORCH_LOGS=recompiles python scripts/mc_compile_harness.py compile.freeze=warn
"""

_HARNESS_VALUE_FLAGS = {"--json": "json", "--base-weights": "base_weights", "--compile-budget": "compile_budget",
                        "--inject": "inject"}


def split_harness_argv(argv: Sequence[str]) -> tuple[dict, list[str]]:
    """Take the harness's own flags out of ``argv``; the rest is for ``parse_workflow_args``."""
    opts: dict[str, Any] = {"strict": False, "help": False}
    rest: list[str] = []
    items, i = list(argv), 0
    while i < len(items):
        item = items[i]
        i += 1
        name, eq, value = item.partition("=")
        if item in ("-h", "--help"):
            opts["help"] = True
        elif item == "--strict":
            opts["strict"] = True
        elif name in _HARNESS_VALUE_FLAGS:
            if not eq:
                if i >= len(items):
                    raise ConfigError(f"flag {name} needs a value ({name}=VALUE or {name} VALUE)")
                value, i = items[i], i + 1
            opts[_HARNESS_VALUE_FLAGS[name]] = value
        else:
            rest.append(item)
    if opts.get("inject") not in (None, *INJECTIONS):
        raise ConfigError(f"flag --inject={opts['inject']!r} is invalid: expected one of {', '.join(INJECTIONS)}")
    if "compile_budget" in opts:
        try:
            opts["compile_budget"] = float(opts["compile_budget"])
        except ValueError:
            raise ConfigError(f"flag --compile-budget={opts['compile_budget']!r} is invalid: expected seconds") from None
    return opts, rest


def resolve_harness_config(argv: Sequence[str]) -> tuple[RunConfig, list[str], bool]:
    """Resolve like the workflow; with no compile requested anywhere, force mc_run.sh's compile flags.

    Returns ``(cfg, hydra_overrides, forced)``.
    """
    args = parse_workflow_args(argv)
    overrides = args.hydra_overrides()
    cfg = load_config(overrides)
    forced = False
    if not args.any_compile and all(m == "off" for m in compile_modes(cfg).values()):
        args.compile_flags = {flag: True for flag in COMPILE_FLAGS}
        overrides = args.hydra_overrides()
        cfg = load_config(overrides)
        forced = True
    return cfg, overrides, forced


def write_json_atomic(path: str | Path, data: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        opts, rest = split_harness_argv(argv)
        if opts["help"]:
            print(USAGE)
            return 0
        cfg, overrides, forced = resolve_harness_config(rest)
        inject = opts.get("inject") or os.environ.get(INJECT_ENV) or None
        if inject not in (None, *INJECTIONS):
            raise ConfigError(f"{INJECT_ENV}={inject!r} is invalid: expected one of {', '.join(INJECTIONS)}")
        from mc.build import resolve_device  # noqa: PLC0415

        resolve_device(cfg.train.device)  # train.device=cuda without a GPU: a clear error, not a traceback
    except (ConfigError, RuntimeError) as exc:
        print(f"mc_compile_harness: error: {exc}", file=sys.stderr)
        return 2
    if forced:
        print("[harness] no compile requested: testing what mc_run.sh turns on "
              "(reduce-overhead for lensnet train+inference and gistnet)")
    print(f"[harness] overrides: {' '.join(overrides) or '(none)'}")
    print(f"[harness] compile modes: {compile_modes(cfg)}")
    verdict = run_harness(cfg, strict=opts["strict"], base_weights=opts.get("base_weights"), inject=inject,
                          compile_budget_s=opts.get("compile_budget", 0.0))
    verdict["info"].update(overrides=overrides, forced_compile=forced, config=to_dict(cfg),
                           command="python scripts/mc_compile_harness.py " + shlex.join(argv))
    print(format_table(verdict))
    if opts.get("json"):
        write_json_atomic(opts["json"], verdict)
        print(f"[harness] verdict written to {opts['json']}")
    return 0 if verdict["passed"] else 1
