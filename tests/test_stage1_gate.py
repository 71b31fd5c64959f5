"""Stage 1's copy gate (``train.stage1.query_loss_target`` / ``max_steps_factor``): it stops at ``steps`` when the
validation query loss is at or below the target, trains on from a warm restart of the learning rate when it is
not, stops at the first measurement that meets it, at the first no better than the best so far (keeping the best
weights), or at the cap, resumes exactly inside the extension, records the outcome in the summary, and refuses
settings that cannot work."""
from __future__ import annotations

import dataclasses

import pytest
import torch

import mc.train.stage1 as stage1_module
from mc.config import ConfigError, DataConfig
from mc.config_checks import validate
from mc.train.checkpoint import load_checkpoint
from mc.train.common import read_metrics
from mc.train.optim import MIN_LR_RATIO, RESTART_RATIO, lr_at
from mc.train.stage1 import train_stage1
from test_train import tiny_cfg

PEAK = 3e-3  # tiny_cfg's stage-1 lr


def gated(target: float, factor: float = 2.0, **stage1):
    cfg = tiny_cfg(s1_steps=4)  # eval_every 2, ckpt_every 2; the cap 4 x factor
    s1 = dataclasses.replace(cfg.train.stage1, query_loss_target=target, max_steps_factor=factor, **stage1)
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, stage1=s1))


def scripted_query_losses(monkeypatch, losses: list[float]) -> list[int]:
    """Replace the validation measurement by ``losses`` in order; returns the list of measured steps' count."""
    calls: list[int] = []

    def fake(model, sampler, cfg, device):
        calls.append(1)
        return 1.0, losses[len(calls) - 1]
    monkeypatch.setattr(stage1_module, "evaluate_base", fake)
    return calls


def test_restart_schedule_starts_at_half_the_peak_and_decays_to_the_floor():
    s1 = gated(0.1).train.stage1
    assert lr_at(3, s1) == pytest.approx(PEAK * (MIN_LR_RATIO + (1 - MIN_LR_RATIO) * 0.5 * (1 + torch.cos(
        torch.tensor(torch.pi * 2 / 3)).item())))  # the ordinary cosine until `steps`
    ext = [lr_at(s, s1) for s in range(4, 9)]
    assert ext[0] == pytest.approx(RESTART_RATIO * PEAK) and ext[-1] == pytest.approx(MIN_LR_RATIO * PEAK)
    assert all(a > b for a, b in zip(ext, ext[1:]))
    off = dataclasses.replace(s1, query_loss_target=0.0)  # gate off: past `steps` stays at the floor, as before
    assert lr_at(6, off) == pytest.approx(MIN_LR_RATIO * PEAK)


def test_gate_met_at_steps_stops_there(tmp_path, monkeypatch):
    calls = scripted_query_losses(monkeypatch, [5.0, 0.05])
    s = train_stage1(gated(0.1), tmp_path, progress=False)
    assert s["steps"] == 4 and len(calls) == 2
    assert s["copy_gate"] == {"target": 0.1, "met": True, "step": 4, "val_query_loss": 0.05}
    assert (tmp_path / "stage1" / "base.pt").is_file()


def test_gate_trains_on_from_the_restart_and_stops_at_the_first_measurement_that_meets_it(tmp_path, monkeypatch):
    calls = scripted_query_losses(monkeypatch, [5.0, 4.0, 0.5, 0.09, 0.01])
    s = train_stage1(gated(0.1, factor=5.0), tmp_path, progress=False)
    assert s["steps"] == 8 and len(calls) == 4  # measured at 2, 4 (above), 6 (above), 8 (met): no step 10
    assert s["copy_gate"] == {"target": 0.1, "met": True, "step": 8, "val_query_loss": 0.09}
    recs = read_metrics(tmp_path / "stage1" / "metrics.jsonl")
    assert [r["step"] for r in recs] == [2, 4, 6, 8]
    assert recs[2]["lr"] == pytest.approx(lr_at(5, gated(0.1, factor=5.0).train.stage1))  # step 6 ran at index 5
    assert recs[2]["lr"] > recs[1]["lr"]  # the warm restart: above the schedule's last learning rate
    assert load_checkpoint(tmp_path / "stage1" / "ckpt.pt")["step"] == 8
    assert (tmp_path / "stage1" / "base.pt").is_file()
    again = train_stage1(gated(0.1, factor=5.0), tmp_path, progress=False)
    assert again["skipped"] and again["copy_gate"]["step"] == 8


def test_gate_not_met_stops_at_the_cap_and_says_so(tmp_path, capsys):
    s = train_stage1(gated(1e-9), tmp_path, progress=False)  # a loss no 8-step base reaches
    assert s["steps"] == 8 and s["copy_gate"]["met"] is False and s["copy_gate"]["step"] == 8
    assert "NOT met at step 8" in capsys.readouterr().out
    assert (tmp_path / "stage1" / "base.pt").is_file()  # stage 2 may still run: the report says the base is weak


def test_a_measurement_no_better_than_the_best_stops_training_on_and_keeps_the_best_weights(tmp_path, monkeypatch, capsys):
    """Step 4 (the gate) measures 4.0, step 6 after the warm restart 4.5: training on stops at 6 and base.pt holds
    step 4's weights, bit for bit those of a run that stopped at 4 (the same batches and learning rates up to it)."""
    calls = scripted_query_losses(monkeypatch, [5.0, 4.0, 4.5, 0.01])
    s = train_stage1(gated(0.1, factor=5.0), tmp_path / "gated", progress=False)
    assert len(calls) == 3 and s["steps"] == 6
    assert s["copy_gate"] == {"target": 0.1, "met": False, "step": 4, "val_query_loss": 4.0, "stopped_at": 6}
    assert s["val_query_loss"] == 4.0 and "copy_gate_best" not in s
    assert "no better than 4.0000 at step 4" in capsys.readouterr().out
    assert not (tmp_path / "gated" / "stage1" / "best.pt").exists()  # removed once base.pt is written
    scripted_query_losses(monkeypatch, [5.0, 4.0])
    train_stage1(gated(0.0), tmp_path / "at4", progress=False)  # gate off: stops at step 4
    kept, ref = (load_checkpoint(tmp_path / d / "stage1" / "base.pt") for d in ("gated", "at4"))
    assert kept.keys() == ref.keys() and all(torch.equal(kept[k], ref[k]) for k in kept)
    trained_on = load_checkpoint(tmp_path / "gated" / "stage1" / "ckpt.pt")
    assert trained_on["step"] == 6 and all(torch.equal(trained_on["model"][k], ref[k]) for k in ref)


def test_the_best_weights_survive_a_resume_inside_the_extension(tmp_path, monkeypatch):
    """Killed at step 5 (after step 4's best was saved, before step 6's worse measurement): the resumed run stops
    at 6 and keeps step 4's weights, as the uninterrupted run does."""
    scripted_query_losses(monkeypatch, [5.0, 4.0, 4.5])
    train_stage1(gated(0.1, factor=5.0), tmp_path / "full", progress=False)
    scripted_query_losses(monkeypatch, [5.0, 4.0])
    part = train_stage1(gated(0.1, factor=5.0), tmp_path / "part", progress=False, stop_after=5)
    assert part["steps"] == 5 and (tmp_path / "part" / "stage1" / "best.pt").is_file()
    scripted_query_losses(monkeypatch, [4.5])
    s = train_stage1(gated(0.1, factor=5.0), tmp_path / "part", progress=False)
    assert s["copy_gate"] == {"target": 0.1, "met": False, "step": 4, "val_query_loss": 4.0, "stopped_at": 6}
    a, b = (load_checkpoint(tmp_path / d / "stage1" / "base.pt") for d in ("full", "part"))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_finished_stage_removes_best_weights_a_kill_left_behind(tmp_path, monkeypatch):
    """A kill after base.pt was written but before best.pt was removed: the next call returns at once (nothing
    to train) and removes the stale best.pt, which nothing reads any more."""
    scripted_query_losses(monkeypatch, [5.0, 4.0, 4.5])
    train_stage1(gated(0.1, factor=5.0), tmp_path, progress=False)
    stale = tmp_path / "stage1" / "best.pt"
    stale.write_bytes(b"left by a kill")
    again = train_stage1(gated(0.1, factor=5.0), tmp_path, progress=False)
    assert again["skipped"] and again["copy_gate"]["stopped_at"] == 6 and not stale.exists()


def test_resume_inside_the_extension_is_exact(tmp_path):
    cfg = gated(1e-9)
    full, part = tmp_path / "full", tmp_path / "part"
    train_stage1(cfg, full, progress=False)
    s = train_stage1(cfg, part, progress=False, stop_after=6)
    assert s["steps"] == 6 and "copy_gate" not in s and not (part / "stage1" / "base.pt").exists()
    train_stage1(cfg, part, progress=False)
    a, b = read_metrics(full / "stage1" / "metrics.jsonl"), read_metrics(part / "stage1" / "metrics.jsonl")
    assert [r["step"] for r in b] == [r["step"] for r in a] == [2, 4, 6, 8]
    for ra, rb in zip(a, b):
        assert rb["train_loss"] == pytest.approx(ra["train_loss"], abs=1e-6) and rb["lr"] == ra["lr"]
    wa, wb = load_checkpoint(full / "stage1" / "base.pt"), load_checkpoint(part / "stage1" / "base.pt")
    assert all(torch.allclose(wa[k], wb[k], atol=1e-6) for k in wa)


@pytest.mark.parametrize("target, factor, key", [
    (0.1, 1.0, "train.stage1.max_steps_factor"),  # no step past `steps`
    (0.1, 1.2, "train.stage1.max_steps_factor"),  # 4 x 1.2 rounds down to 4
    (0.0, 0.5, "train.stage1.max_steps_factor"),  # below 1 even with the gate off
    (0.0, True, "train.stage1.max_steps_factor"),
    (0.0, float("nan"), "train.stage1.max_steps_factor"),
    (-0.1, 2.0, "train.stage1.query_loss_target"),
    (float("nan"), 2.0, "train.stage1.query_loss_target"),
])
def test_bad_gate_settings_are_config_errors(target, factor, key):
    with pytest.raises(ConfigError, match=key):
        validate(gated(target, factor))


def test_gate_without_recall_rows_is_a_config_error():
    cfg = gated(0.1)
    cfg = dataclasses.replace(cfg, data=DataConfig(source="stdlib", recall_mix=0.0, recall=cfg.data.recall))
    with pytest.raises(ConfigError, match="data.recall_mix=0"):
        validate(cfg)
    validate(dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, recall_mix=0.5)))  # with recall rows: fine
