"""The benchmark's Markdown: the per-case table, the session scaling summary and the KV-cache table.

Reads only the result dict :func:`mc.app.bench.run_bench` returns (also as saved JSON), so a table
can be re-rendered from ``bench/results/*.json`` without running anything.
"""
from __future__ import annotations

def _fmt_s(v) -> str:
    if isinstance(v, str):
        return v
    if v is None:
        return "n/a"
    return f"{v * 1e3:.2f} ms" if v < 1 else f"{v:.2f} s"


def decode_table(rows: list[dict]) -> list[str]:
    """Markdown lines: decode tokens/s with and without the KV cache per bucket and mode, and the speed-up
    (both measured in the same run) from the medians and from the best calls (a shared machine's load
    spikes hit medians, rarely minimums), then the refocus cost; empty without decode rows."""
    by = {(r["mode"], r["case"]): (r["median_s"], r.get("min_s") or r["median_s"]) for r in rows}
    out = []
    for mode, case in by:
        other = (mode, case[:-5] + "nocache")
        if case.startswith(("decode", "refocus@")) and case.endswith("/cache") and other in by:
            (a, amin), (b, bmin) = by[(mode, case)], by[other]
            if case.startswith("decode"):  # decode_step@ and decode@: per token
                out.append(f"| {case[:-6]} | {mode} | {1 / a:.0f} tok/s | {1 / b:.0f} tok/s | {b / a:.2f}x | "
                           f"{bmin / amin:.2f}x |")
            else:
                out.append(f"| {case[:-6]} | {mode} | {a * 1e3:.2f} ms | {b * 1e3:.2f} ms | {b / a:.2f}x | "
                           f"{bmin / amin:.2f}x |")
    if not out:
        return []
    return ["", "KV cache (both sides in this run; decode_step = the base model's part of a step, decode = the whole "
            "decode loop per generated token: sampling, append, make-room collapses and the cache suffix recomputes "
            "they cause; refocus = one refocus + the next logits, i.e. the cache rebuild):", "",
            "| case | mode | with cache (median) | without (median) | speed-up (medians) | speed-up (best calls) |",
            "|---|---|---|---|---|---|", *out]


def to_markdown(res: dict) -> str:
    """The benchmark as a Markdown section (header with device, torch, date; one row per case x mode)."""
    m = res["config"]["mc"]
    lines = [f"### Benchmark: eager vs torch.compile modes ({'quick' if res.get('quick') else 'full'})", "",
             f"- device: **{res['device_name']}** (`{res['device']}`), torch {res['torch']}, python {res['python']}, "
             f"{res['date']}",
             f"- config: preset `{res['config'].get('preset')}`, model d={res['config']['model']['d_model']} "
             f"layers={res['config']['model']['n_layers']}, K={m['block_size']}, max_lod={m['max_lod']}, "
             f"budget={m['max_entries']}, buckets={m['bucket_ladder']}, history={m['history_tokens']}, "
             f"stage-2 batch={res['config']['stage2_batch']}",
             "- ratio = median / eager median of the same case in this run (< 1 is faster). First call = the "
             "first call's wall time (compiles included); warm = in a fresh process with an empty inductor "
             "cache after loading the Mega-Cache saved by the cold run.",
             f"- CUDA graphs: {', '.join(f'{k}: {v}' for k, v in res['cudagraph'].items())}", "",
             "| case | mode | median | ratio to eager | first call (cold) | first call (warm Mega-Cache) | graphs |",
             "|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        ratio = "n/a" if r["ratio_to_eager"] is None else f"{r['ratio_to_eager']:.2f}x"
        graphs = "n/a" if r["graphs"] is None else str(r["graphs"])
        lines.append(f"| {r['case']} | {r['mode']} | {_fmt_s(r['median_s'])} | {ratio} | "
                     f"{_fmt_s(r['first_call_cold_s'])} | {_fmt_s(r['first_call_warm_s'])} | {graphs} |")
    lines += _session_scaling(res["rows"])
    lines += decode_table(res["rows"])
    for mode, err in res.get("errors", {}).items():
        lines.append(f"\n**{mode} failed**: {err.get('cold') or err.get('warm')}")
        if err.get("stderr_tail"):
            lines.append("```\n" + "\n".join(err["stderr_tail"]) + "\n```")
    return "\n".join(lines) + "\n"


def _session_scaling(rows: list[dict]) -> list[str]:
    """Per mode and kind: the session case's median at its longest length over the one at its shortest."""
    out = []
    for mode in dict.fromkeys(r["mode"] for r in rows):
        for kind in ("append", "refocus"):
            rs = [r for r in rows if r["mode"] == mode and r["case"].startswith(f"session_{kind}@") and r["median_s"]]
            if len(rs) >= 2:
                out.append(f"- session {kind}, {mode}: {rs[-1]['case'].split('@')[1]} / {rs[0]['case'].split('@')[1]} = "
                           f"{rs[-1]['median_s'] / rs[0]['median_s']:.2f}x")
    return ["", "Session cost vs history length (median at the longest / at the shortest; flat = 1.00x):", *out] if out else []
