"""The compile harness's verdict: pass criteria, checks and the printed table, from a plain record.

:func:`build_verdict` turns a :class:`mc.harness.record.HarnessRecord` (what one run observed)
into the verdict dict the CLI writes and the workflow's compile gate reads; :func:`format_table`
is what the CLI prints. The fields are listed in :func:`build_verdict`; every check in
:data:`CHECK_NAMES` is ``{"passed", "value", "detail"}``. See obsidian "Runbook" (compile harness).
"""
from __future__ import annotations

from typing import Any

import torch

from mc.compile.guards import describe_all
from mc.harness.record import HarnessRecord

SCORE_TOL = 1e-3  # max |compiled - eager| / max |eager| (fp32; Inductor reorders reductions)
GRAD_TOL = 2e-3  # the same for accumulated gradients
MEMORY_TOL_BYTES = 4 << 20  # allowed growth of allocated / reserved CUDA memory between rounds
CHECK_NAMES = ("no_exception", "recompiles_after_warmup", "graph_breaks", "cudagraphs", "held_outputs",
               "eager_parity", "finite", "memory_flat", "compile_time", "coverage")


def check(passed: bool, value: Any, detail: str) -> dict:
    """One verdict entry: ``{"passed", "value", "detail"}`` (value = the number the check is about)."""
    return {"passed": bool(passed), "value": value, "detail": detail}


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


def build_verdict(h: HarnessRecord) -> dict:
    """The verdict of one run: ``passed``, ``config_hash`` (:func:`mc.config_loading.compile_hash`),
    ``torch_version``, ``device``, ``recompiles_after_warmup``, ``graph_breaks``, ``cudagraph``
    {``status``, ``recordings_warmup``, ``recordings_steady``, ``skips``}, ``checks`` {name:
    {``passed``, ``value``, ``detail``}} for every name in :data:`CHECK_NAMES`, and ``info`` (modes,
    timings, compile summaries, notes, errors, held outputs, memory)."""
    mon = h.monitor
    warm = mon["warmup"] if mon else None
    steady = mon["steady"] if mon else None
    checks: dict[str, dict] = {}

    # no exception (CUDA-graph errors included: their text is kept)
    checks["no_exception"] = check(not h.errors, len(h.errors), "; ".join(
        f"[{e['phase']}] {' '.join(e['error'].split())[:400]}" for e in h.errors) or "every phase ran without error")

    # recompiles after warm-up: compile events / records after the freeze point, plus fail_on_recompile errors
    if not h.warmed or steady is None:
        rec = None
        checks["recompiles_after_warmup"] = check(False, None, "warm-up did not finish: steady state never reached")
    elif steady["recompiles"] is None or steady["compiles"] is None:
        rec = None
        checks["recompiles_after_warmup"] = check(False, None, "not observable in this torch: " + "; ".join(mon["notes"]))
    else:
        compiles = steady["compiles"] + (steady["lazy_backward_compiles"] or 0)
        rec = max(steady["recompiles"], compiles) + len(h.recompile_errors)
        # every failed guard of each recompile (compiled or refused), with its frame and source line
        guards = describe_all(steady.get("recompile_guards") or []) or (
            [" ".join(r.split())[:600] for r in steady["recompile_reasons"]] + h.recompile_errors)
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
    status = h.cudagraph_status if mon else "unknown (monitor not started)"
    rw = warm["cudagraph_recordings"] if warm else None
    rs = steady["cudagraph_recordings"] if steady else None
    skips = None if not warm or warm["cudagraph_skips"] is None else warm["cudagraph_skips"] + ((steady or {}).get("cudagraph_skips") or 0)
    cudagraph = {"status": status, "recordings_warmup": rw, "recordings_steady": rs, "skips": skips}
    if status.startswith("n/a"):
        checks["cudagraphs"] = check(True, status, f"CUDA graphs are captured on CUDA only; on {h.device_type} "
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
    nf = h.nonfinite
    checks["finite"] = check(bool(h.tensors_checked) and not nf, len(nf),
                             ("non-finite: " + ", ".join(nf[:10])) if nf else f"{h.tensors_checked} tensors checked (losses, scores, grads, gists, logits)")

    # device memory flat between steady rounds
    base, end = h.memory.get("baseline"), h.memory.get("end")
    if h.device_type != "cuda":
        checks["memory_flat"] = check(True, f"n/a ({h.device_type})", "device memory is measured on CUDA only")
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
    calls = h.net_calls
    want = h.wanted_counts()
    short = [k for k, n in want.items() if h.counts[k] < n]
    short += [k for k in ("lensnet/train", "lensnet/inference", "gistnet/train", "gistnet/inference") if not calls.get(k)]
    checks["coverage"] = check(not short, sum(calls.values()), "net calls " + ", ".join(f"{k}={v}" for k, v in calls.items())
                               + "; " + ", ".join(f"{k}={v}" for k, v in h.counts.items())
                               + (f"; MISSING: {', '.join(short)}" if short else ""))

    return {
        "passed": all(c["passed"] for c in checks.values()),
        "config_hash": h.config_hash,
        "torch_version": torch.__version__,
        "device": h.device_label,
        "recompiles_after_warmup": rec,
        "graph_breaks": gb,
        "cudagraph": cudagraph,
        "checks": checks,
        "info": {
            "compile_modes": dict(h.compile_modes), "strict": bool(h.strict), "inject": h.inject,
            "wall_s": round(h.wall_s, 2), "timings_s": dict(h.timings), "notes": list(h.notes) + (mon["notes"] if mon else []),
            "compile_warmup": _phase_summary(warm), "compile_steady": _phase_summary(steady),
            "errors": list(h.errors), "held": list(h.held), "memory": dict(h.memory),
        },
    }
