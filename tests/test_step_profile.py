"""The stage-2 step profile (mc.app.step_profile, scripts/mc_step_profile.py): the whole micro-step against the base's
forward + backward over the same working contexts, and the phases of one step from the run_step labels."""
from __future__ import annotations

import json

import pytest

from _tiny_config import TINY
from mc.app.step_profile import PHASES, main


def test_profile_reports_the_ratio_and_every_phase(tmp_path):
    assert main(["--presets", "smoke", "--reps", "2", "--json", str(tmp_path / "p.json"), "--md", str(tmp_path / "p.md"),
                 "--table", str(tmp_path / "ops.txt"), *TINY[:-1], "train.device=cpu", "data=recall", "mc.distill_weight=1.0"]) == 0
    res = json.loads((tmp_path / "p.json").read_text())["presets"]["smoke"]
    assert res["rows"] == 2 and res["bucket"] == 32  # TINY: B=1 x (1 + 1 variants), the 32-entry bucket
    assert res["ratio"] == pytest.approx(res["step_ms"] / res["base_fwd_bwd_ms"]) and res["ratio"] > 1  # the step contains the base's work
    # the floor: each trained net's own forward + backward, timed beside the step
    assert res["gistnet_fwd_bwd_ms"] > 0 and res["lensnet_fwd_bwd_ms"] > 0
    assert res["floor_ms"] == pytest.approx(res["base_fwd_bwd_ms"] + res["gistnet_fwd_bwd_ms"] + res["lensnet_fwd_bwd_ms"])
    assert res["floor_ratio"] == pytest.approx(res["floor_ms"] / res["base_fwd_bwd_ms"])
    assert res["step_over_floor"] == pytest.approx(res["step_ms"] / res["floor_ms"])
    ph = res["phases_ms"]
    assert set(PHASES) <= set(ph)
    for labelled in ("gistnet", "base", "lensnet", "teacher", "losses"):  # found through the profiler labels
        assert ph[labelled] > 0, ph
    assert "step / base" in (tmp_path / "p.md").read_text() and "step / floor" in (tmp_path / "p.md").read_text()
    table = (tmp_path / "ops.smoke.txt").read_text()  # one profiled step's op table, per preset
    assert "Self CPU" in table and "mc.step.base" in table
