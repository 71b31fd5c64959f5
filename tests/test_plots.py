"""Readable report plots: every axis labelled, legends outside the data, stage-2 LM losses apart from
the auxiliary (preference, gap) curves. Figures are captured just before they are saved."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("matplotlib", reason="plots need matplotlib (extra 'plots')")

import mc.app.plots as plots  # noqa: E402
from mc.app.report import write_report  # noqa: E402
from mc.config import RunConfig  # noqa: E402
from test_report import _full_run  # noqa: E402

STAGE2_KEYS = ("lm_loss", "pref_loss", "pref_acc", "baseline_loss", "best_loss", "gap")


@pytest.fixture
def figures(monkeypatch):
    """{file name: [(title, xlabel, ylabel, legend labels, legend outside?)] per axis} of every saved figure."""
    seen: dict[str, list[tuple]] = {}
    save = plots._save

    def capture(plt, fig, path, **kw):
        fig.canvas.draw()
        axes = []
        for ax in fig.axes:
            if ax.get_label() == "<colorbar>":
                continue
            leg = ax.get_legend()
            outside = None
            if leg is not None:  # the legend box lies entirely right of the axes' data area
                outside = leg.get_window_extent().x0 >= ax.get_window_extent().x1 - 1
            labels = [t.get_text() for t in leg.get_texts()] if leg is not None else []
            axes.append((ax.get_title(), ax.get_xlabel(), ax.get_ylabel(), labels, outside))
        seen[str(path).rsplit("/", 1)[-1]] = axes
        return save(plt, fig, path, **kw)

    monkeypatch.setattr(plots, "_save", capture)
    return seen


def _stage2_run(tmp_path):
    run = _full_run(tmp_path)
    rows = []
    for s in range(1, 6):
        rec = {"step": s, "lr": 1e-3, "seq_per_s": 9.0, "active_pairs": 4.0}
        rec.update({k: 3.0 - 0.1 * s + i * 0.01 for i, k in enumerate(STAGE2_KEYS)})
        if s % 2 == 0:
            rec.update({f"val_{k}": v + 0.05 for k, v in list(rec.items()) if k in STAGE2_KEYS})
        rows.append(rec)
    (run / "stage2" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ev = json.loads((run / "eval" / "eval.json").read_text())  # plus a long-range sweep: its heatmaps too
    cells = [{"task": "passkey", "length": n, "multiple": n // 128, "depth": d, "variant": v, "accuracy": 0.5, "n": 2}
             for n in (512, 2048) for d in (0.1, 0.9) for v in ("recency", "focused")]
    ev["long_range"] = {"base_window": 128, "budget": 48, "lengths": [512, 2048], "depths": [0.1, 0.9],
                        "tasks": ["passkey"], "variants": ["recency", "focused"], "cells": cells, "rows": []}
    (run / "eval" / "eval.json").write_text(json.dumps(ev))
    return run


def test_every_report_plot_has_axis_labels_and_legends_outside(tmp_path, figures):
    text = write_report(RunConfig(name="t"), _stage2_run(tmp_path)).read_text()
    assert "plot `" not in text  # no plot failed
    assert {"stage1_losses.png", "stage2_losses.png", "stage2_aux.png", "stage2_accuracy.png", "eval_bars.png",
            "lod_map_0.png", "long_range_passkey.png"} <= set(figures)
    for name, axes in figures.items():
        for title, xlabel, ylabel, _, outside in axes:
            assert xlabel and ylabel, (name, title)
            assert outside in (None, True), (name, title)  # a legend never sits on the curves


def test_stage2_lm_losses_are_split_from_the_aux_curves(tmp_path, figures):
    write_report(RunConfig(name="t"), _stage2_run(tmp_path))
    (lm,) = figures["stage2_losses.png"]
    assert set(lm[3]) == {"lm_loss", "baseline_loss", "best_loss", "val_lm_loss", "val_baseline_loss", "val_best_loss"}
    assert "cross-entropy" in lm[2]
    aux = figures["stage2_aux.png"]
    assert [set(a[3]) for a in aux] == [{"pref_loss", "val_pref_loss"}, {"gap", "val_gap"}]
    assert set(figures["stage2_accuracy.png"][0][3]) == {"pref_acc", "val_pref_acc"}


def test_a_panel_without_a_y_label_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no y-axis label"):
        plots.plot_panels([("t", "", {"a": ([1], [1.0])})], tmp_path / "x.png")
    with pytest.raises(TypeError):
        plots.plot_curves({"a": ([1], [1.0])}, tmp_path / "y.png", title="t")  # ylabel is required
