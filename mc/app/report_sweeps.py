"""The run report's long-range sweep section: a table per task (variant x length) and heatmaps; held-out
template tasks (``<task>@held_out``) get their own table.

Owns :func:`long_range_section`, which :mod:`mc.app.report` calls with its report builder (``rep.add`` for
Markdown lines, ``rep.plot`` for a figure that may be skipped without matplotlib) and ``eval.json``'s
``long_range`` section.
"""
from __future__ import annotations


def _share(cells: list[dict], key: str) -> float | None:  # document-weighted mean of a per-cell share
    have = [(c[key], c["n"]) for c in cells if c.get(key) is not None]
    return sum(a * n for a, n in have) / max(1, sum(n for _, n in have)) if have else None


def long_range_section(rep, lr: dict, warning: str | None = None) -> None:
    """The long-range sweep: a table per task (variant x length, averaged over depths) and heatmaps; ``warning``
    (the base's own copy failed, :func:`mc.app.report_eval.base_copy_warning`) is repeated above it."""
    from mc.app.plots import plot_long_range_heatmaps  # noqa: PLC0415
    if not lr.get("cells"):
        return
    rep.add("### Long-range sweep", "", *([warning, ""] if warning else []),
            f"Base window {lr['base_window']} tokens, budget {lr['budget']} entries; compression (history / entries): "
            + ", ".join(f"{n}: {c}x" for n, c in lr.get("compression", {}).items()) + ". Exact recall per cell "
            "(documents per cell in brackets); edits/refocus beside the focused and random numbers, how often the needle "
            "was at LOD0 when the answer began (a miss with it there is the base's copy) and another path than LensNet's kept."
            + (f" Needle depths: each bucket's documents spread over depth +- {lr['depth_jitter']:g}."
               if lr.get("depth_jitter") else " Needle depths: exact (every document of a cell at one position)."), "")
    if lr.get("haystack"):  # sweeps before haystacks existed had word filler and KEY=VALUE only
        rep.add(f"Haystack: {lr['haystack']}; record templates {', '.join(f'`{t}`' for t in lr['templates'])}"
                + (f"; `<task>@held_out` uses `{lr['eval_template']}`, never trained on." if lr.get("eval_template")
                   else "."), "")
    for task in lr["tasks"]:
        rep.add(f"**{task}** (mean over depths {', '.join(f'{d:.0%}' for d in lr['depths'])})", "")
        rep.add("| variant | " + " | ".join(f"{n // lr['base_window']}x" for n in lr["lengths"]) + " |",
                "|---" * (len(lr["lengths"]) + 1) + "|")
        for v in lr["variants"]:
            cells = []
            for n in lr["lengths"]:
                sel = [c for c in lr["cells"] if (c["task"], c["variant"], c["length"]) == (task, v, n)]
                acc = sum(c["accuracy"] * c["n"] for c in sel) / max(1, sum(c["n"] for c in sel))
                cell = f"{acc:.0%} ({sum(c['n'] for c in sel)})"
                ed = [c["edits_per_refocus"] for c in sel if c.get("edits_per_refocus") is not None]
                if v in ("focused", "random") and ed:
                    cell += f", {sum(ed) / len(ed):.1f} edits"
                at0, other = _share(sel, "needle_at_lod0"), _share(sel, "other_branch")
                cell += "" if at0 is None else f", LOD0 {at0:.0%}"
                cell += f", other path {other:.0%}" if other else ""  # branched refocus: another path than LensNet's won
                cells.append(cell)
            rep.add(f"| {v} | " + " | ".join(cells) + " |")
        rep.add("")
        rep.plot(plot_long_range_heatmaps, lr, task, rep.plot_dir / f"long_range_{task}.png",
                 alt=f"long-range {task} heatmaps")
    rep.add("")
