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

What it observes goes into a plain :class:`mc.harness.record.HarnessRecord` (the measuring tools
are in :mod:`mc.harness.probes`); :func:`mc.harness.verdict.build_verdict` turns the record into the
verdict dict. The CLI is :mod:`mc.harness.cli`. Test hooks, used only to prove the harness can
fail: ``inject="recompile"`` (a call at an unwarmed shape after warm-up), ``inject="alias"``
(LensNet's helper skips its clone) and ``inject="hook"`` (a forward hook on LensNet closing over a
flag flipped after warm-up, :mod:`mc.harness.inject`); the CLI also takes them from env ``MC_HARNESS_INJECT``.
"""
from __future__ import annotations

import copy
import time
from typing import Any, Callable

import torch

from mc.config import RunConfig
from mc.harness.probes import (RawSpy, copy_weights, cuda_memory, device_label, finite_flag, grads_of, make_mwc,
                               max_rel_err, net_calls, nonfinite, recompile_guards, worst_grad_err)
from mc.harness.record import INJECTIONS, MIN_MICRO_STEPS, N_REFOCUS, HarnessRecord
from mc.harness.verdict import build_verdict


def compile_modes(cfg: RunConfig) -> dict[str, str]:
    c = cfg.compile
    return {f"{net}.{ctx}": getattr(getattr(c, net), ctx) for net in ("lensnet", "gistnet") for ctx in ("train", "inference")}


def _eager_cfg(cfg: RunConfig) -> RunConfig:
    out = copy.deepcopy(cfg)
    for net in (out.compile.lensnet, out.compile.gistnet):
        net.train = net.inference = "off"
    return out


class HarnessRun:
    """One harness run: drives the controller phase by phase and fills :attr:`record`."""

    def __init__(self, cfg: RunConfig, *, strict: bool, base_weights: str | None, inject: str | None,
                 compile_budget_s: float, log: Callable[[str], None]) -> None:
        from mc.build import resolve_device  # noqa: PLC0415 - keeps `import mc.harness.run` light
        from mc.config_loading import compile_hash  # noqa: PLC0415

        if inject not in (None, *INJECTIONS):
            raise ValueError(f"inject={inject!r}: expected one of {', '.join(INJECTIONS)} (or None)")
        self.cfg, self.strict, self.base_weights, self.inject, self.log = cfg, strict, base_weights, inject, log
        self.device = resolve_device(cfg.train.device)
        self.modes = compile_modes(cfg)
        self.record = HarnessRecord(config_hash=compile_hash(cfg), device_type=self.device.type,
                                    device_label=device_label(self.device), compile_modes=dict(self.modes),
                                    strict=bool(strict), inject=inject, compile_budget_s=compile_budget_s)
        self.tracked: list[tuple[str, torch.Tensor]] = []  # (name, finite flag) of every output tested for NaN/Inf
        self.data_gen = torch.Generator().manual_seed(cfg.train.seed)
        self.ctl = self.twin = self.spy = self.opt = self.telemetry = self.hook_flag = None
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
                self.record.recompile_errors.append(f"[{name}] {guards}")
            self.record.errors.append({"phase": name, "type": type(exc).__name__, "error": text[:4000]})
            self.log(f"[harness] {name} raised {text.splitlines()[0][:300]}")
            return False
        finally:
            self.record.timings[name] = round(time.perf_counter() - t0, 3)

    def track(self, name: str, t: torch.Tensor) -> None:
        self.tracked.append((name, finite_flag(t)))

    def held_result(self, what: str, kept: torch.Tensor, copy_: torch.Tensor) -> None:
        """A kept output compared with the copy taken right after its call (the poison test)."""
        diff = float((kept.detach().float() - copy_.float()).abs().max()) if kept.numel() else 0.0
        self.record.held.append({"what": what, "changed": not torch.equal(kept.detach(), copy_), "aliased": False,
                                 "max_abs_diff": diff})

    def check_alias(self, net: str, what: str, returned: torch.Tensor) -> None:
        """Record ``returned`` as a failure if it shares storage with ``net``'s raw compiled output."""
        if self.spy.aliased(net, returned):
            self.record.held.append({"what": what, "changed": False, "aliased": True, "max_abs_diff": 0.0})

    # ------------------------------------------------------------------ phases
    def build(self) -> None:
        from mc.build import build_controller  # noqa: PLC0415
        from mc.compile.boundary import strict_cudagraphs  # noqa: PLC0415
        from mc.compile.telemetry import Telemetry  # noqa: PLC0415

        if self.strict or self.cfg.compile.cudagraph_strict:
            if self.device.type == "cuda":
                self._strict_ctx = strict_cudagraphs()
                if self._strict_ctx.missing:
                    self.record.notes.append(f"strict mode incomplete: this torch lacks {', '.join(self._strict_ctx.missing)}")
            else:
                self.record.notes.append("strict CUDA-graph mode applies to CUDA only; ignored on " + self.device.type)
        self.telemetry = Telemetry(device=self.device).start()  # before any compile, so every event is seen
        self.ctl = build_controller(self.cfg, device=self.device, base_weights=self.base_weights,
                                    telemetry=self.telemetry)
        if self.inject == "hook":  # test hook: registered before warm-up, so the compiled graphs trace it
            from mc.harness.inject import install_capture_hook  # noqa: PLC0415

            self.hook_flag = install_capture_hook(self.ctl.lensnet)

    def warmup(self) -> None:
        t0 = time.perf_counter()
        self.ctl.warmup(torch.Generator().manual_seed(self.cfg.train.seed))
        self.record.timings["warmup_wall_s"] = round(time.perf_counter() - t0, 3)
        self.spy = RawSpy(self.ctl).install()
        if self.hook_flag is not None:
            self.hook_flag.capture = True  # flipped after warm-up: every later LensNet call fails its guard
        self.opt = torch.optim.AdamW(self.ctl.aux_parameters(), lr=self.cfg.train.stage2.lr)
        if self.inject == "alias":  # test hook: LensNet's helper hands out the raw compiled output
            self.ctl.compiled_lensnet.clone_outputs = lambda out, *, context: out

    def build_twin(self) -> None:
        from mc.build import build_controller  # noqa: PLC0415
        from mc.compile.telemetry import Telemetry  # noqa: PLC0415

        self.twin = build_controller(_eager_cfg(self.cfg), device=self.device, telemetry=Telemetry(device=self.device))
        copy_weights(self.ctl, self.twin)

    def train_round(self, *, parity: bool) -> None:
        c, cfg = self.ctl, self.cfg
        n_micro = max(MIN_MICRO_STEPS, cfg.train.stage2.grad_accum)
        b, t = cfg.train.stage2.batch_size, cfg.mc.history_tokens
        ids = [torch.randint(0, 256, (b, t), generator=self.data_gen) for _ in range(n_micro)]
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=self.data_gen))
        c.zero_grad(self.opt)
        gen = torch.Generator().manual_seed(seed)
        scores, kept = [], None
        for m, x in enumerate(ids):
            out = c.train_step(x, gen)
            self.check_alias("lensnet", f"lensnet/train scores micro-step {m}", out.scores)
            if m == 0:  # poison: kept across the next micro-steps (same shape: the same graph replays)
                kept = (out.scores, out.scores.detach().clone())
            (out.total / n_micro).backward()
            c.end_micro_step()
            scores.append(out.scores.detach().clone())
            for k, v in (("total", out.total), ("lm_loss", out.lm_loss), ("scores", out.scores),
                         ("preference", out.preference.loss)):
                self.track(f"train.{k}[{m}]", v)
        self.held_result("lensnet/train scores of micro-step 0 after later micro-steps", kept[0], kept[1])
        grads = {**grads_of(c.gistnet, "gistnet"), **grads_of(c.lensnet, "lensnet")}
        for k, g in grads.items():
            self.track(f"grad.{k}", g)
        if parity:
            copy_weights(self.ctl, self.twin)
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
            self.record.parity["train scores"] = worst
            ref = {**grads_of(self.twin.gistnet, "gistnet"), **grads_of(self.twin.lensnet, "lensnet")}
            self.record.parity["accumulated grads"] = worst_grad_err(grads, ref)
        self.opt.step()
        self.record.counts["train_micro_steps"] += n_micro
        self.record.counts["optimizer_steps"] += 1

    def inference_round(self) -> None:
        c, mc, inf = self.ctl, self.cfg.mc, self.cfg.allocator.inference
        prompt_len = 2 * mc.max_entries + mc.block_size ** mc.max_lod  # longer than the WC, gists at every LOD
        s = c.begin_session(torch.randint(0, 256, (prompt_len,), generator=self.data_gen))
        for _ in range(N_REFOCUS):  # each append reaches refocus_interval: one refocus each
            c.append(torch.randint(0, 256, (inf.refocus_interval,), generator=self.data_gen))
        c.refocus()
        self.track("inference.next_token_logits", c.next_token_logits())
        s.wc.validate()
        self.record.counts["refocuses"] += len(s.refocus_log)

    def held_outputs(self) -> None:
        """Poison test at inference (both nets): keep A, run B, C (A's shape), D; A must not change."""
        c, mc, d = self.ctl, self.cfg.mc, self.cfg.model.d_model
        g = torch.Generator().manual_seed(self.cfg.train.seed + 1)
        lad, glad = mc.bucket_ladder, mc.gist_bucket_ladder
        copy_weights(self.ctl, self.twin)
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
                self.check_alias(net, f"{net}/inference call {'ABCD'[i]}", out)
                if i == 0:
                    kept, snap, first_in = out, out.detach().clone(), x
            self.held_result(f"{net}/inference output A after calls B, C, D", kept, snap)
            with torch.no_grad():  # eager parity of the same call A
                ref = (self.twin.lensnet_scores(first_in, 4 * sizes[0]) if net == "lensnet"
                       else self.twin.gist_blocks(first_in))
            self.record.parity[f"{net} inference"] = (max_rel_err(snap, ref), "call A")

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
        elif self.cfg.compile.is_on("train"):
            ids = torch.randint(0, 256, (self.cfg.train.stage2.batch_size + 1, mc.history_tokens), generator=g)
            c.train_step(ids, g).total.backward()
            c.end_micro_step()
        else:
            raise ValueError("inject=recompile needs at least one compiled net/context (every compile mode is off)")

    # ------------------------------------------------------------------ the run
    def run(self) -> HarnessRecord:
        """Every phase in order; the record is complete (monitor snapshot included) before clean-up."""
        t0 = time.perf_counter()
        try:
            ok = self.phase("build", self.build) and self.phase("warmup", self.warmup)
            if ok:
                twin_ok = self.phase("eager_twin", self.build_twin)
                self.phase("train_round_1", lambda: self.train_round(parity=twin_ok))
                self.phase("inference_round_1", self.inference_round)
                if twin_ok:
                    self.phase("held_outputs", self.held_outputs)
                self.record.memory["baseline"] = cuda_memory(self.device)
                self.phase("train_round_2", lambda: self.train_round(parity=False))
                self.phase("inference_round_2", self.inference_round)
                self.record.memory["end"] = cuda_memory(self.device)
                if self.inject == "recompile":
                    self.phase("inject_recompile", self.inject_recompile)
            self.finish(ok, time.perf_counter() - t0)
            return self.record
        finally:
            self.cleanup()

    def finish(self, warmed: bool, wall_s: float) -> None:
        """Copy what the live objects observed into the record, while the monitor still runs."""
        r = self.record
        r.warmed, r.wall_s = warmed, wall_s
        r.tensors_checked, r.nonfinite = len(self.tracked), nonfinite(self.tracked)
        if self.ctl is not None:
            r.net_calls = net_calls(self.ctl)
        if self.telemetry is not None and self.telemetry.monitor.started:
            r.monitor = self.telemetry.monitor.snapshot()
            r.cudagraph_status = self.telemetry.cudagraph_status()

    def cleanup(self) -> None:
        from mc.compile.boundary import unfreeze  # noqa: PLC0415

        if self.spy is not None:
            self.spy.uninstall()
        if self.hook_flag is not None:
            self.hook_flag.handle.remove()
        if self.ctl is not None:
            self.ctl.compiled_lensnet.__dict__.pop("clone_outputs", None)
        unfreeze(self.telemetry.monitor if self.telemetry is not None else None)
        if self._strict_ctx is not None:
            self._strict_ctx.restore()
        if self.telemetry is not None:
            self.telemetry.monitor.stop()
            self.telemetry.close()


def run_harness(cfg: RunConfig, *, strict: bool = False, base_weights: str | None = None, inject: str | None = None,
                compile_budget_s: float = 0.0, log: Callable[[str], None] = print) -> dict:
    """Run the harness on ``cfg`` as resolved (nothing is shrunk) and return the verdict.

    The verdict's fields are listed in :func:`mc.harness.verdict.build_verdict`. Run it in a fresh
    process per config: Dynamo state is global.
    """
    record = HarnessRun(cfg, strict=strict, base_weights=base_weights, inject=inject,
                        compile_budget_s=compile_budget_s, log=log).run()
    return build_verdict(record)
