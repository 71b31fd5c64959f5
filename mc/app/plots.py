"""PNG plots for the run report: training curves, LOD maps, and the evaluation bars.

matplotlib is optional: :func:`matplotlib_missing` says why plots cannot be drawn (the report then
says so); every ``plot_*`` function writes one PNG with the non-interactive Agg backend and
returns its path.

LOD map: one horizontal band per layout (before / after refocus); x = token position in the
history, colour = the LOD of the working-context entry covering that token (0 = raw tokens,
darker = coarser gists). Thin white ticks separate neighbouring gists so they can be counted;
highlighted spans (recall: the queried record and the query) are
drawn as outlined boxes above the bands.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence


def matplotlib_missing() -> str | None:
    """None when matplotlib can draw here, else the reason (for the report)."""
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot  # noqa: F401, PLC0415
    except Exception as exc:  # ImportError, or a broken backend install
        return f"matplotlib is not importable ({type(exc).__name__}: {exc}); pip install matplotlib to get plots"
    return None


def _plt():
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def _save(plt, fig, path: str | Path, *, tight_layout: bool = True, **savefig_kw) -> Path:
    """Lay out (unless the caller already placed a colour bar by hand), write ``path`` (atomically, as every
    run-folder file: a full disk raises :class:`mc.io.WriteError` and leaves no half PNG), free the figure."""
    from mc.io import atomic_write  # noqa: PLC0415

    if tight_layout:
        fig.tight_layout()
    path = Path(path)
    try:
        atomic_write(path, lambda f: fig.savefig(f, format=path.suffix.lstrip(".") or "png", **savefig_kw))
    finally:
        plt.close(fig)
    return path


def _legend_outside(ax) -> None:
    """Legend to the right of the axes, so no curve is hidden under it."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=8, frameon=False)


def plot_panels(panels: Sequence[tuple[str, str, dict[str, tuple[Sequence[float], Sequence[float]]]]],
                path: str | Path, *, xlabel: str = "step") -> Path:
    """One axis per ``(title, ylabel, {label: (steps, values)})``, stacked, sharing x; every axis
    labelled, every legend outside its axis. Separate panels keep series of different scales
    (an LM loss and a preference loss) from flattening each other."""
    for title, ylabel, _ in panels:
        if not ylabel:
            raise ValueError(f"plot panel {title!r} has no y-axis label")
    plt = _plt()
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 3.0 * len(panels)), dpi=110, squeeze=False, sharex=True)
    for ax, (title, ylabel, series) in zip(axes[:, 0], panels):
        for label, (xs, ys) in series.items():
            ax.plot(list(xs), list(ys), label=label, marker="." if len(xs) < 40 else None, linewidth=1.4,
                    linestyle="--" if label.startswith("val_") else "-")  # validation curves dashed
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.xaxis.set_tick_params(labelbottom=True)  # sharex hides upper tick labels; each panel reads alone
        ax.grid(alpha=0.3)
        if series:
            _legend_outside(ax)
    return _save(plt, fig, path, bbox_inches="tight")


def plot_curves(series: dict[str, tuple[Sequence[float], Sequence[float]]], path: str | Path, *, title: str,
                ylabel: str, xlabel: str = "step") -> Path:
    """Line plot of ``{label: (steps, values)}`` (one panel of :func:`plot_panels`)."""
    return plot_panels([(title, ylabel, series)], path, xlabel=xlabel)


def _token_lods(entries: Sequence[Sequence[int]], block_size: int) -> tuple[list[int], list[int], list[int]]:
    """Per entry: start, width, lod (entries are ``(lod, index)``)."""
    starts, widths, lods = [], [], []
    for lod, idx in entries:
        w = block_size ** int(lod)
        starts.append(int(idx) * w)
        widths.append(w)
        lods.append(int(lod))
    return starts, widths, lods


def plot_lod_map(record: dict, path: str | Path) -> Path:
    """Before/after-refocus LOD bands of one working context (a record of ``eval.json["lod_maps"]``)."""
    plt = _plt()
    from matplotlib.patches import Patch, Rectangle  # noqa: PLC0415

    K, max_lod, n = int(record["block_size"]), int(record["max_lod"]), int(record["num_tokens"])
    palette = ["#fde725", "#35b779", "#31688e", "#440154", "#000000"]
    colours = [palette[min(i, len(palette) - 1)] for i in range(max_lod + 1)]
    fig, ax = plt.subplots(figsize=(9, 2.3), dpi=110)
    rows = [("after refocus", record["after"]), ("before refocus", record["before"])]
    for y, (label, entries) in enumerate(rows):
        starts, widths, lods = _token_lods(entries, K)
        ax.broken_barh(list(zip(starts, widths)), (y + 0.1, 0.8), facecolors=[colours[l] for l in lods],
                       edgecolors="none")
        # entry boundaries of gists, so individual gists are countable
        gx = [s for s, l in zip(starts, lods) if l > 0]
        ax.vlines(gx, y + 0.1, y + 0.9, colors="white", linewidth=0.4)
    for h in record.get("highlights", []):
        s, e = h["span"]
        ax.add_patch(Rectangle((s, -0.15), max(e - s, n / 400), 2.3, fill=False, edgecolor="#d62728", linewidth=1.2))
        right = s > 0.8 * n  # keep labels near the right edge inside the axes
        ax.text(e if right else s, 2.25, h["label"], color="#d62728", fontsize=7, va="bottom",
                ha="right" if right else "left")
    ax.set_xlim(0, n)
    ax.set_ylim(-0.2, 2.6)
    ax.set_yticks([0.5, 1.5], [f"{label}\n{len(entries)} entries" for label, entries in rows], fontsize=7)
    ax.set_ylabel("working context", fontsize=8)
    ax.set_xlabel("token position in the history")
    ax.set_title(f"{record.get('doc', '')}: {record.get('what', '')} ({n} tokens, K={K})", fontsize=9)
    ax.legend(handles=[Patch(color=colours[l], label=f"LOD{l} ({K ** l} tok)") for l in range(max_lod + 1)],
              loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False)
    return _save(plt, fig, path, bbox_inches="tight")


def plot_eval_bars(metrics: dict, variants: Sequence[str], path: str | Path) -> Path:
    """One panel per metric: mean per variant with its 95% interval as an error bar."""
    plt = _plt()
    names = [m for m, per in metrics.items() if any((per.get(v) or {}).get("mean") is not None for v in variants)]
    fig, axes = plt.subplots(1, max(1, len(names)), figsize=(3.2 * max(1, len(names)), 3.0), dpi=110, squeeze=False)
    for ax, name in zip(axes[0], names):
        per = metrics[name]
        xs, means, lo, hi = [], [], [], []
        for v in variants:
            ci = per.get(v) or {}
            if ci.get("mean") is None:
                continue
            xs.append(v)
            means.append(ci["mean"])
            lo.append(max(0.0, ci["mean"] - ci["lo"]))
            hi.append(max(0.0, ci["hi"] - ci["mean"]))
        ax.bar(xs, means, yerr=[lo, hi], capsize=3, color=["#999999", "#6baed6", "#fd8d3c", "#31a354"][:len(xs)])
        ax.set_title(name.replace("_", " "), fontsize=9)
        ax.set_xlabel("variant", fontsize=8)
        ax.set_ylabel(f"{name.replace('_', ' ')} (mean, 95% CI)", fontsize=8)
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
        ax.grid(axis="y", alpha=0.3)
    return _save(plt, fig, path)


def plot_long_range_heatmaps(long_range: dict, task: str, path: str | Path) -> Path:
    """One length x depth heatmap of exact recall per variant (the long-range sweep of one task)."""
    plt = _plt()
    variants = list(long_range["variants"])
    lengths, depths = list(long_range["lengths"]), list(long_range["depths"])
    cells = {(c["variant"], c["length"], c["depth"]): c["accuracy"] for c in long_range["cells"] if c["task"] == task}
    fig, axes = plt.subplots(1, len(variants), figsize=(2.3 * len(variants) + 1.2, 2.8), dpi=110, squeeze=False)
    image = None
    for ax, v in zip(axes[0], variants):
        grid = [[cells.get((v, n, d), float("nan")) for n in lengths] for d in depths]  # rows: depth
        image = ax.imshow(grid, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto", origin="lower")
        ax.set_title(v, fontsize=9)
        ax.set_xticks(range(len(lengths)), [f"{n // long_range['base_window']}x" for n in lengths], fontsize=7)
        ax.set_yticks(range(len(depths)), [f"{d:.0%}" for d in depths], fontsize=7)
        ax.set_xlabel("history / base window", fontsize=8)
        ax.set_ylabel("needle depth", fontsize=8)  # on every panel: each is read on its own
        for yi, row in enumerate(grid):
            for xi, val in enumerate(row):
                if val == val:  # not NaN
                    ax.text(xi, yi, f"{val:.0%}", ha="center", va="center", fontsize=7,
                            color="white" if val < 0.5 else "black")
    fig.suptitle(f"{task}: exact recall (budget {long_range['budget']} entries)", fontsize=10, y=1.06)
    if image is not None:
        fig.colorbar(image, ax=list(axes[0]), fraction=0.02, pad=0.02, label="exact recall")
    return _save(plt, fig, path, bbox_inches="tight", tight_layout=False)
