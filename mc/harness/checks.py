"""Measuring tools for the compile harness (``mc.harness.run``): each one turns an observation into numbers.

Kept apart from the harness's orchestration so each tool is small and testable on its own:

- :func:`device_label`: the device string a verdict is keyed on (the workflow compares it).
- :class:`RawSpy`: records the storage of every RAW compiled output, so the harness can prove
  that what a helper returned is a clone and not the compiled output itself (on CPU a raw output
  is never overwritten, so the value-based poison test alone cannot see an aliasing helper).
- :func:`make_mwc`: a materialised working context in a private buffer (own storage per call,
  for the poison test's calls A, B, C, D).
- :func:`max_rel_err` / :func:`worst_grad_err`: eager-parity metrics.
- :func:`nonfinite`: which tracked tensors hold NaN/Inf.
- :func:`cuda_memory`: the memory numbers the "flat after warm-up" check compares.
- :func:`recompile_guards`: guard text out of a ``fail_on_recompile`` exception.
- :func:`format_table`: the human-readable verdict.
"""
from __future__ import annotations

import gc
import re
from typing import Any, Iterable

import torch
from torch import Tensor

from mc.working_context import MaterializedWC, WCBuffer


def device_label(device: torch.device | str) -> str:
    """``"cpu"`` or ``"cuda:<GPU name>"``: a verdict is only reused on the same kind of device."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(dev)}"
    return dev.type


def check(passed: bool, value: Any, detail: str) -> dict:
    """One verdict entry: ``{"passed", "value", "detail"}`` (value = the number the check is about)."""
    return {"passed": bool(passed), "value": value, "detail": detail}


# ----------------------------------------------------------------------------- aliasing
def storage_ptrs(obj: Any) -> set[int]:
    """Data pointers of the storages behind a tensor or a (nested) tuple/list of tensors."""
    if isinstance(obj, Tensor):
        return {obj.untyped_storage().data_ptr()}
    if isinstance(obj, (tuple, list)):
        out: set[int] = set()
        for o in obj:
            out |= storage_ptrs(o)
        return out
    return set()


class RawSpy:
    """Wraps ``CompiledNet.run`` of the controller's nets to remember the storage of the last raw output.

    Only integers are kept (never the tensors), so the spy does not change what stays alive. A
    helper's result is compared with the raw output *of the same call*, which was still alive when
    the helper cloned it: a real clone can never share its storage.
    """

    def __init__(self, controller: Any) -> None:
        self.controller = controller
        self.last: dict[str, set[int]] = {}
        self._saved: list[tuple[Any, Any]] = []

    def install(self) -> "RawSpy":
        for net in (self.controller.compiled_lensnet, self.controller.compiled_gistnet):
            orig = net.run

            def spy(*args: Any, _orig=orig, _name=net.name, **kwargs: Any) -> Any:
                out = _orig(*args, **kwargs)
                self.last[_name] = storage_ptrs(out)
                return out

            self._saved.append((net, orig))
            net.run = spy  # instance attribute shadows the method; uninstall() deletes it
        return self

    def uninstall(self) -> None:
        for net, _ in self._saved:
            net.__dict__.pop("run", None)
        self._saved = []

    def aliased(self, net: str, returned: Tensor) -> bool:
        """True if ``returned`` shares storage with the last raw output of ``net``."""
        return bool(storage_ptrs(returned) & self.last.get(net, set()))


# ----------------------------------------------------------------------------- inputs
def make_mwc(size: int, length: int, dim: int, *, device: torch.device, generator: torch.Generator,
             max_lod: int = 0) -> MaterializedWC:
    """A working context padded to ``size`` with ``length`` real entries, in its OWN buffer."""
    if not 0 < length <= size:
        raise ValueError(f"make_mwc: length {length} must be in 1..size ({size})")
    buf = WCBuffer(size, dim, device=device)
    buf.embeds[:length] = torch.randn(length, dim, generator=generator).to(device)
    buf.mask[:length] = True
    buf.positions[:length] = torch.arange(length, dtype=torch.float32, device=device) * 2.0
    if max_lod > 0:
        buf.lods[: length // 2] = torch.randint(0, max_lod + 1, (length // 2,), generator=generator).to(device)
    return MaterializedWC(embeds=buf.embeds, mask=buf.mask, positions=buf.positions, lods=buf.lods,
                          token_ids=buf.token_ids, length=length, bucket=size)


# ----------------------------------------------------------------------------- numbers
def max_rel_err(a: Tensor, b: Tensor) -> float:
    """max|a - b| / max(max|b|, 1e-6): a scale-free distance between a result and its reference."""
    a, b = a.detach().float().cpu(), b.detach().float().cpu()
    if a.shape != b.shape:
        return float("inf")
    if a.numel() == 0:
        return 0.0
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-6))


def grads_of(module: torch.nn.Module, prefix: str) -> dict[str, Tensor]:
    """``{name: grad copy}`` of every trainable parameter (missing grads become zeros)."""
    out = {}
    for name, p in module.named_parameters():
        if p.requires_grad:
            out[f"{prefix}.{name}"] = p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
    return out


def worst_grad_err(got: dict[str, Tensor], ref: dict[str, Tensor]) -> tuple[float, str]:
    """The largest :func:`max_rel_err` over matching gradients, and its parameter name."""
    worst, where = 0.0, "-"
    for name, g in ref.items():
        err = max_rel_err(got[name], g) if name in got else float("inf")
        if err > worst:
            worst, where = err, name
    return worst, where


def nonfinite(tensors: Iterable[tuple[str, Tensor]]) -> list[str]:
    """Names of the tracked tensors that contain NaN or Inf."""
    return [name for name, t in tensors if t.is_floating_point() and not bool(torch.isfinite(t.detach()).all())]


def cuda_memory(device: torch.device) -> dict[str, int] | None:
    """Allocated / reserved bytes after a sync and a GC (None off CUDA)."""
    if torch.device(device).type != "cuda":
        return None
    gc.collect()
    torch.cuda.synchronize(device)
    return {"allocated": int(torch.cuda.memory_allocated(device)), "reserved": int(torch.cuda.memory_reserved(device))}


_GUARD = re.compile(r"Detected recompile.*", re.S)


def recompile_guards(text: str) -> str | None:
    """The guard-failure text of a ``fail_on_recompile`` / ``error_on_recompile`` exception, else None."""
    m = _GUARD.search(text) or (re.search(r"[Rr]ecompil.*", text, re.S) if "guard" in text.lower() else None)
    return " ".join(m.group(0).split())[:1500] if m else None


# ----------------------------------------------------------------------------- table
def format_table(verdict: dict) -> str:
    """A fixed-width table of the checks plus a one-line verdict (what the CLI prints)."""
    cg = verdict["cudagraph"]
    lines = [
        f"MegaContext compile harness   config_hash={verdict['config_hash']}   torch={verdict['torch_version']}"
        f"   device={verdict['device']}",
        f"recompiles after warm-up: {verdict['recompiles_after_warmup']}   graph breaks: {verdict['graph_breaks']}"
        f"   cudagraphs: {cg['status']} (recorded warm-up {cg['recordings_warmup']}, steady "
        f"{cg['recordings_steady']}, skips {cg['skips']})",
        "",
        f"{'check':<26}{'result':<8}{'value':<22}detail",
        f"{'-' * 26}{'-' * 8}{'-' * 22}{'-' * 40}",
    ]
    for name, c in verdict["checks"].items():
        value = c["value"]
        if isinstance(value, float):
            value = f"{value:.3g}"
        lines.append(f"{name:<26}{'PASS' if c['passed'] else 'FAIL':<8}{str(value)[:21]:<22}{c['detail']}")
    failed = [n for n, c in verdict["checks"].items() if not c["passed"]]
    lines.append("")
    lines.append("VERDICT: PASS" if verdict["passed"] else f"VERDICT: FAIL ({', '.join(failed)})")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the verdict
def _phase_summary(p: dict | None) -> dict | None:
    return None if p is None else {k: v for k, v in p.items() if k != "events"}


def _calls_after_warmup(h: Any) -> dict:
    snap = h.ctl.telemetry.counters.snapshot()["totals"] if h.ctl is not None else {}
    return {f"{n}/{c}": snap[n][c]["calls"] for n in snap for c in snap[n]}


def build_verdict(h: Any, warmed: bool, wall_s: float) -> dict:
    """Turn a finished ``mc.harness._Harness`` run into the verdict dict (see ``run_harness``)."""
    from mc.config_loading import compile_hash  # noqa: PLC0415
    from mc.harness.run import GRAD_TOL, MEMORY_TOL_BYTES, N_REFOCUS, SCORE_TOL  # noqa: PLC0415

    mon = h.telemetry.monitor.snapshot() if h.telemetry is not None and h.telemetry.monitor.started else None
    warm = mon["warmup"] if mon else None
    steady = mon["steady"] if mon else None
    checks: dict[str, dict] = {}

    # no exception (CUDA-graph errors included: their text is kept)
    checks["no_exception"] = check(not h.errors, len(h.errors), "; ".join(
        f"[{e['phase']}] {' '.join(e['error'].split())[:400]}" for e in h.errors) or "every phase ran without error")

    # recompiles after warm-up: compile events / records after the freeze point, plus fail_on_recompile errors
    if not warmed or steady is None:
        rec = None
        checks["recompiles_after_warmup"] = check(False, None, "warm-up did not finish: steady state never reached")
    elif steady["recompiles"] is None or steady["compiles"] is None:
        rec = None
        checks["recompiles_after_warmup"] = check(False, None, "not observable in this torch: " + "; ".join(mon["notes"]))
    else:
        compiles = steady["compiles"] + (steady["lazy_backward_compiles"] or 0)
        rec = max(steady["recompiles"], compiles) + len(h.recompile_errors)
        guards = [" ".join(r.split())[:600] for r in steady["recompile_reasons"]] + h.recompile_errors
        detail = ("guards: " + " | ".join(guards)) if guards else (
            f"{compiles} compiles after warm-up ({warm['compiles']} frame + {warm['lazy_backward_compiles']} "
            f"backward compiles in warm-up)" if rec == 0 else f"{compiles} compile event(s) after warm-up")
        checks["recompiles_after_warmup"] = check(rec == 0, rec, detail)

    # graph breaks (fullgraph=True turns one into an Unsupported exception: counted too)
    unsupported = [e for e in h.errors if e["type"] in ("Unsupported", "UserError") or "graph break" in e["error"].lower()]
    if warm is None or warm["graph_breaks"] is None:
        gb = None
        checks["graph_breaks"] = check(False, None, "graph-break counter unavailable (or the monitor never started)")
    else:
        gb = warm["graph_breaks"] + ((steady or {}).get("graph_breaks") or 0) + len(unsupported)
        reasons = sorted(set(warm["graph_break_reasons"] + ((steady or {}).get("graph_break_reasons") or [])))
        reasons += [e["error"][:300] for e in unsupported]
        checks["graph_breaks"] = check(gb == 0, gb, "; ".join(reasons) or "0 graph breaks (fullgraph=True)")

    # CUDA graphs: recorded in warm-up, none after, 0 skips (n/a on CPU)
    status = h.telemetry.cudagraph_status() if mon else "unknown (monitor not started)"
    rw = warm["cudagraph_recordings"] if warm else None
    rs = steady["cudagraph_recordings"] if steady else None
    skips = None if not warm or warm["cudagraph_skips"] is None else warm["cudagraph_skips"] + ((steady or {}).get("cudagraph_skips") or 0)
    cudagraph = {"status": status, "recordings_warmup": rw, "recordings_steady": rs, "skips": skips}
    if status.startswith("n/a"):
        checks["cudagraphs"] = check(True, status, f"CUDA graphs are captured on CUDA only; on {h.device.type} "
                                     f"reduce-overhead compiles and skips capture silently ({skips} skips counted)")
    elif status == "off":
        checks["cudagraphs"] = check(True, status, "no net runs a CUDA-graph mode (reduce-overhead) on this device")
    else:
        reasons = sorted(set((warm or {}).get("cudagraph_skip_reasons", []) + ((steady or {}).get("cudagraph_skip_reasons") or [])))
        checks["cudagraphs"] = check(status == "ok", status, f"recordings warm-up={rw} steady={rs} skips={skips}"
                                     + (f"; skip reasons: {'; '.join(reasons)}" if reasons else ""))

    # held outputs: the poison test and the no-alias test
    bad = [x for x in h.held if x["changed"] or x["aliased"]]
    if not h.held:
        checks["held_outputs"] = check(False, None, "poison test did not run")
    else:
        detail = "; ".join(
            f"{x['what']}: " + ("ALIASED: shares storage with the raw compiled output (the helper did not clone)"
                                if x["aliased"] else f"CHANGED by later calls (max |diff| {x['max_abs_diff']:.3g})")
            for x in bad) or f"{len(h.held)} kept outputs unchanged after later calls; every returned tensor is a clone"
        checks["held_outputs"] = check(not bad, len(bad), detail)

    # eager parity
    need = ("train scores", "accumulated grads", "lensnet inference", "gistnet inference")
    missing = [k for k in need if k not in h.parity]
    worst = max((v[0] for v in h.parity.values()), default=None)
    parts = [f"{k} {v[0]:.2e} ({v[1]})" for k, v in h.parity.items()]
    failing = [k for k, v in h.parity.items() if v[0] > (GRAD_TOL if k == "accumulated grads" else SCORE_TOL)]
    checks["eager_parity"] = check(not missing and not failing, worst,
                                   "; ".join(parts + [f"not measured: {', '.join(missing)}"] * bool(missing))
                                   + f" | tol scores {SCORE_TOL:g}, grads {GRAD_TOL:g} (max|diff|/max|eager|)")

    # finite values
    nf = nonfinite(h.tracked)
    checks["finite"] = check(bool(h.tracked) and not nf, len(nf),
                             ("non-finite: " + ", ".join(nf[:10])) if nf else f"{len(h.tracked)} tensors checked (losses, scores, grads, gists, logits)")

    # device memory flat between steady rounds
    base, end = h.memory.get("baseline"), h.memory.get("end")
    if h.device.type != "cuda":
        checks["memory_flat"] = check(True, f"n/a ({h.device.type})", "device memory is measured on CUDA only")
    elif base is None or end is None:
        checks["memory_flat"] = check(False, None, "not measured (a round failed before the measurement)")
    else:
        grow = {k: end[k] - base[k] for k in base}
        checks["memory_flat"] = check(max(grow.values()) <= MEMORY_TOL_BYTES, max(grow.values()),
                                      f"growth round 1 -> 2: allocated {grow['allocated']} B, reserved {grow['reserved']} B "
                                      f"(tol {MEMORY_TOL_BYTES} B; baseline allocated {base['allocated']} B)")

    # compile time (informational unless a budget is given)
    if warm is None or warm["compile_time_s"] is None:
        checks["compile_time"] = check(False, None, "compile time not observable")
    else:
        ct = round(warm["compile_time_s"] + ((steady or {}).get("compile_time_s") or 0.0), 3)
        budget = h.compile_budget_s or 0.0
        checks["compile_time"] = check(budget <= 0 or ct <= budget, ct, f"{warm['compiles']} frame + "
                                       f"{warm['lazy_backward_compiles']} backward compiles in warm-up; warm-up wall "
                                       f"{h.timings.get('warmup_wall_s')} s; budget " + (f"{budget:g} s" if budget > 0 else "none (report only)"))

    # coverage: the harness really exercised every path
    calls = _calls_after_warmup(h)
    want = {"train_micro_steps": 4, "optimizer_steps": 2, "refocuses": 2 * (N_REFOCUS + 1)}
    short = [k for k, n in want.items() if h.counts[k] < n]
    short += [k for k in ("lensnet/train", "lensnet/inference", "gistnet/train", "gistnet/inference") if not calls.get(k)]
    checks["coverage"] = check(not short, sum(calls.values()), "net calls " + ", ".join(f"{k}={v}" for k, v in calls.items())
                               + "; " + ", ".join(f"{k}={v}" for k, v in h.counts.items())
                               + (f"; MISSING: {', '.join(short)}" if short else ""))

    return {
        "passed": all(c["passed"] for c in checks.values()),
        "config_hash": compile_hash(h.cfg),
        "torch_version": torch.__version__,
        "device": device_label(h.device),
        "recompiles_after_warmup": rec,
        "graph_breaks": gb,
        "cudagraph": cudagraph,
        "checks": checks,
        "info": {
            "compile_modes": dict(h.modes), "strict": bool(h.strict), "inject": h.inject,
            "wall_s": round(wall_s, 2), "timings_s": dict(h.timings), "notes": list(h.notes) + (mon["notes"] if mon else []),
            "compile_warmup": _phase_summary(warm), "compile_steady": _phase_summary(steady),
            "errors": list(h.errors), "held": list(h.held), "memory": dict(h.memory),
        },
    }
