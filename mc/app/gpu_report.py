"""The GPU proof kit's report: ``OUT/parts/*.json`` -> ``OUT/<date>-<gpu>.json`` and ``.md``.

Owns :func:`write_report` and the targets the kit checks (obsidian/Runbook.md "GPU proof"):
reduce-overhead >= 3x eager on the allocator LensNet call, 0 recompiles and 0 CUDA-graph skips
after warm-up, held outputs never overwritten, flat memory, eager parity, no host-device sync in
a micro-step, the aux nets' cost <= 15 % of the base forward + backward, and <= 3 ms of host wait
per micro-step; and, from the opt-in SmolLM2 part, the real reader's passkey bars (issue "real-model tasks"):
the oracle at 8x W >= 0.9 of the model's own full-context score at 2x W, focused >= 0.8 of the oracle at 8x W
(means over the depth buckets), and decoding with the KV cache at least as fast as without it. Every figure the
parts recorded goes into the JSON; the Markdown shows them all.
Device, torch, CUDA and date come from the parts themselves (the machine that ran them), so the
report can be rebuilt anywhere (``--report-only``).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from mc.io import write_text

ORDER = ("tests", "sync", "harness", "bench", "overlap", "workflow", "smollm2")
# The parts each target of targets() is read from, in its order.
TARGET_PARTS = (("bench",), ("harness", "sync"), ("harness",), ("harness",), ("harness",), ("harness",), ("sync",),
                ("sync",), ("overlap",), ("smollm2",), ("smollm2",), ("smollm2",))


def part_ok(status) -> bool:
    """Whether a part's status counts as passed: ``pass...``, or ``n/a ...`` (a check this machine cannot make)."""
    return str(status).startswith(("pass", "n/a"))


def _check(parts: dict, name: str) -> dict:
    return ((parts.get("harness") or {}).get("figures") or {}).get("checks", {}).get(name) or {}


def targets(parts: dict, cuda: bool) -> list[dict]:
    """``[{target, value, met}]``; ``met`` is True / False, or a string saying why it does not apply."""
    na = "n/a (needs CUDA)"
    out = []
    rows = ((parts.get("bench") or {}).get("figures") or {}).get("rows") or []
    eager = {r["case"]: r["median_s"] for r in rows if r["mode"] == "eager"}
    speed = {r["case"]: eager[r["case"]] / r["median_s"] for r in rows
             if r["mode"] == "reduce-overhead" and r["case"].startswith("lensnet_call") and r["median_s"]
             and eager.get(r["case"])}
    worst = min(speed.values()) if speed else None
    out.append({"target": "reduce-overhead >= 3x eager, allocator LensNet call (every bucket)",
                "value": ", ".join(f"{c.split('@')[-1]}: {v:.2f}x" for c, v in speed.items()) or "not measured",
                "met": (worst >= 3.0 if cuda else na) if worst is not None else False})
    h = (parts.get("harness") or {}).get("figures") or {}
    s = (parts.get("sync") or {}).get("figures") or {}
    rec = h.get("recompiles_after_warmup")
    out.append({"target": "0 recompiles after warm-up (harness; sync part)",
                "value": f"{rec}; {s.get('compiles_after_warmup')}",
                "met": rec == 0 and s.get("compiles_after_warmup") in (0, None) if h else False})
    cg = h.get("cudagraph") or {}
    out.append({"target": "CUDA graphs recorded in warm-up, none after, 0 skips",
                "value": f"{cg.get('status')}: warm-up {cg.get('recordings_warmup')}, after {cg.get('recordings_steady')}, "
                         f"skips {cg.get('skips')}",
                "met": (_check(parts, "cudagraphs").get("passed") is True if cuda else na) if h else False})
    for name, what in (("held_outputs", "no output overwritten by a later replay"),
                       ("memory_flat", "flat device memory between rounds"), ("eager_parity", "eager parity")):
        c = _check(parts, name)
        out.append({"target": f"{what} (harness {name})", "value": c.get("value"),
                    "met": (c.get("passed") is True if (cuda or name != "memory_flat") else na) if c else False})
    audit, cs = s.get("meta_audit") or {}, s.get("cuda_sync") or {}
    out.append({"target": "no host-device sync in the stage-2 micro-step",
                "value": f"meta audit {'clean' if audit.get('passed') else audit}; CUDA sync debug: "
                         f"{cs.get('status') or ('clean' if cs.get('passed') else cs.get('error'))}",
                "met": bool(audit.get("passed")) and (cs.get("passed") is True if cuda else True) if s else False})
    t = s.get("timing") or {}
    aux = t.get("aux_overhead")
    out.append({"target": "stage-2 aux cost (LensNet + GistNet + preference) <= 15 % of base fwd+bwd",
                "value": (f"+{100 * aux:.1f} % ({t['micro_step_ms']:.1f} vs {t['base_fwd_bwd_ms']:.1f} ms)"
                          if aux is not None else "not measured"),
                "met": (aux <= 0.15 if cuda else na) if aux is not None else False})
    o = [r for r in ((parts.get("overlap") or {}).get("figures") or {}).get("runs") or [] if r["mode"] != "inline"]
    wait = max((r["wait_mean_ms"] for r in o), default=None)
    out.append({"target": "host wait per micro-step <= 3 ms (prefetched)",
                "value": "; ".join(f"{r['wait_mean_ms']:.2f} ms at device {r['device_ms']:.0f} ms" for r in o) or "not measured",
                "met": wait <= 3.0 if wait is not None else False})
    sm = ((parts.get("smollm2") or {}).get("figures") or {}).get("tasks_mean_over_depths") or {}
    for what, num, den, bar in (("oracle at 8x W >= 0.9 x full at 2x W", "passkey 8x oracle", "passkey 2x full", 0.9),
                                ("focused >= 0.8 x oracle at 8x W", "passkey 8x focused", "passkey 8x oracle", 0.8)):
        a, b = sm.get(num), sm.get(den)
        out.append({"target": f"SmolLM2 passkey (h100_smollm2, shortened): {what}",
                    "value": f"{a} vs {b}" if a is not None and b is not None else "not measured",
                    "met": (a >= bar * b and b > 0) if a is not None and b is not None else False})
    rates = ((parts.get("smollm2") or {}).get("figures") or {}).get("decode_tok_s") or {}
    kv, plain = rates.get("kv_cache"), rates.get("no_kv_cache")
    out.append({"target": "SmolLM2 decode (mc_generate.py): KV cache tokens/s >= no cache",
                "value": f"{kv} vs {plain} tok/s" if kv is not None and plain is not None else "not measured",
                "met": kv >= plain if kv is not None and plain is not None else False})
    # A target none of whose parts ran reads "not run", not NO: a one-part call's report is not a failed proof.
    for t, sources in zip(out, TARGET_PARTS, strict=True):  # a new target must name its parts
        if not any(p in parts for p in sources):
            t["met"] = f"not run (--part {','.join(sources)})"
    return out


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, dict):
        return ", ".join(f"{k}={_fmt(x)}" for k, x in v.items())
    return str(v)


def _markdown(rep: dict) -> str:
    e = rep["env"]
    lines = [f"# GPU proof kit: {e.get('device')} ({e.get('date')}{', DRY RUN on CPU, plumbing only' if e.get('dry_run') else ''})",
             "", f"- device: **{e.get('device')}**; nvidia-smi: {e.get('nvidia_smi')}",
             f"- torch {e.get('torch')}, CUDA runtime {e.get('cuda_runtime')}, python {e.get('python')}, "
             f"{e.get('cpu_count')} CPU cores, {e.get('platform')}",
             f"- date {e.get('date')} {e.get('time')}; parts run: {', '.join(rep['parts']) or 'none'}", "",
             "## Targets", "", "| target | value | met |", "|---|---|---|"]
    for t in rep["targets"]:
        met = {True: "yes", False: "**NO**"}.get(t["met"], t["met"])
        lines.append(f"| {t['target']} | {t['value']} | {met} |")
    for name in ORDER:
        part = rep["parts"].get(name)
        if part is None:
            continue
        lines += ["", f"## {name}: {part['status']} ({part.get('seconds')} s of a {part.get('cap_s')} s cap)", ""]
        if part.get("command"):
            lines.append(f"`{part['command']}`\n")
        fig = part.get("figures") or {}
        if name == "bench" and fig.get("rows"):
            lines += ["| case | mode | median | ratio to eager | first call cold | first call warm | graphs |",
                      "|---|---|---|---|---|---|---|"]
            for r in fig["rows"]:
                lines.append(f"| {r['case']} | {r['mode']} | {_fmt(r['median_s'] * 1e3)} ms | {_fmt(r['ratio_to_eager'])} "
                             f"| {_fmt(r['first_call_cold_s'])} s | {_fmt(r['first_call_warm_s'])} | {r['graphs']} |")
            fig = {k: v for k, v in fig.items() if k != "rows"}
        if name == "harness" and fig.get("checks"):
            lines += ["| check | passed | value | detail |", "|---|---|---|---|"]
            for n, c in fig["checks"].items():
                lines.append(f"| {n} | {c['passed']} | {_fmt(c['value'])} | {str(c['detail']).replace('|', '/')[:200]} |")
            fig = {k: v for k, v in fig.items() if k != "checks"}
        for k, v in fig.items():
            lines.append(f"- {k}: {_fmt(v) if not isinstance(v, list) else json.dumps(v, default=str)}")
        if not part_ok(part["status"]) and part.get("log_tail"):
            lines += ["", "```", *part["log_tail"][-30:], "```"]
    return "\n".join(lines) + "\n"


def write_report(out: Path) -> tuple[Path, Path] | None:
    """Assemble every ``out/parts/*.json`` into ``out/<date>-<gpu>.json`` / ``.md``; None if there are none."""
    files = sorted((Path(out) / "parts").glob("*.json"))
    if not files:
        return None
    parts = {}
    for f in files:
        rec = json.loads(f.read_text())
        parts[rec["part"]] = rec
    env = next(iter(parts.values()))["env"]
    cuda = bool(env.get("cuda_available")) and not env.get("dry_run")
    slug = "cpu-dry-run" if env.get("dry_run") else re.sub(r"[^a-z0-9]+", "-", str(env.get("device")).lower()).strip("-")
    rep = {"kind": "mc-gpu-check", "env": env, "targets": targets(parts, cuda),
           "parts": {p: {k: v for k, v in parts[p].items() if k != "env"} for p in ORDER if p in parts}}
    stem = Path(out) / f"{env.get('date')}-{slug}"
    json_path, md_path = Path(f"{stem}.json"), Path(f"{stem}.md")
    write_text(json_path, json.dumps(rep, indent=1, default=str) + "\n")
    write_text(md_path, _markdown(rep))
    return json_path, md_path
