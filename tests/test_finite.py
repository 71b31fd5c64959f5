"""Non-finite weights and losses: NaN/inf weights are refused at every load site (base weights, the
stage-2 nets for inference and evaluation, a training resume) with one line naming the file and the
tensor, and a training loop whose loss or weights go non-finite stops before it saves, naming the
checkpoint that holds the last good weights (mc.train.checkpoint: check_finite, DivergenceGuard).

A tiny run folder is trained for real (2 + 2 steps, seconds); the faults are injected by poisoning
its files or by wrapping the loss so that it, or only its gradient, turns NaN at a chosen step.
"""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
import torch

from _tiny_config import TINY
from mc.build import build_controller, load_run
from mc.config import to_dict
from mc.config_loading import load_config
from mc.controller import MCController
from mc.eval.evaluate import load_trained_controller
from mc.io import write_json
from mc.train import stage1 as stage1_mod
from mc.train.checkpoint import (CheckpointError, DivergenceGuard, TrainingDiverged, check_finite, load_checkpoint,
                                 save_checkpoint)
from mc.train.stage1 import train_stage1
from mc.train.stage2 import train_stage2

STEPS = [f"train.{s}.{k}={v}" for s in ("stage1", "stage2") for k, v in
         (("steps", 2), ("warmup_steps", 1), ("eval_every", 2), ("eval_batches", 1), ("ckpt_every", 2))]
RECALL = ["data=recall", "data.recall.doc_tokens=64", "data.recall.n_records=2", "telemetry.jsonl=false"]


def _cfg(*extra: str):
    return load_config([*TINY, *STEPS, *RECALL, *extra])


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    cfg = _cfg("name=fin")
    d = tmp_path_factory.mktemp("runs") / "fin"
    d.mkdir()
    write_json(d / "config.json", to_dict(cfg))
    train_stage1(cfg, d, progress=False)
    train_stage2(cfg, d, progress=False)
    return d


def _copy(run_dir: Path, dest: Path) -> Path:
    shutil.copytree(run_dir, dest)
    return dest


def _poison(path: Path, section: str | None) -> str:
    """NaN into the first floating tensor of ``state[section]`` (the whole state when None); its dotted name."""
    state = load_checkpoint(path)
    part = state if section is None else state[section]
    while True:  # down to a state dict of tensors (the controller's holds one per net)
        key = next(iter(part))
        if isinstance(part[key], dict):
            section = f"{section}.{key}" if section else key
            part = part[key]
            continue
        break
    key = next(k for k, v in part.items() if torch.is_tensor(v) and v.is_floating_point())
    part[key] = torch.full_like(part[key], float("nan"))
    save_checkpoint(path, state)
    return f"{section}.{key}" if section else key


def test_check_finite_names_the_file_and_the_first_bad_tensor():
    state = {"model": {"a": torch.ones(3), "b": torch.tensor([1.0, float("inf"), float("nan"), 2.0])},
             "optimizer": {"state": {0: {"exp_avg": torch.full((2,), float("nan"))}}},
             "rng": {"torch": torch.zeros(8, dtype=torch.uint8)}, "step": 3}
    with pytest.raises(CheckpointError, match=r"^x/ckpt.pt holds non-finite weights: model.b \(2 NaN/inf of 4\); redo it$"):
        check_finite(state, "x/ckpt.pt", fix="redo it")
    check_finite({"model": {"a": torch.ones(3)}, "rng": [torch.zeros(2, dtype=torch.uint8)], "step": 3}, "ok.pt")


def test_nan_base_weights_are_refused_by_build_controller_and_load_run(run_dir, tmp_path):
    run = _copy(run_dir, tmp_path / "fin")
    name = _poison(run / "stage1" / "base.pt", None)
    cfg = _cfg()
    want = rf"{run / 'stage1' / 'base.pt'} holds non-finite weights: {name} \(\d+ NaN/inf of \d+\); .*re-run stage 1"
    with pytest.raises(CheckpointError, match=want):
        build_controller(cfg, device=torch.device("cpu"), base_weights=run / "stage1" / "base.pt")
    with pytest.raises(CheckpointError, match=want):
        load_run(run)  # mc_generate's path: it used to decode [0, 0, 0, 0, 0] from these weights


def test_nan_stage2_weights_are_refused_for_inference_and_evaluation(run_dir, tmp_path):
    run = _copy(run_dir, tmp_path / "fin")
    name = _poison(run / "stage2" / "ckpt.pt", "controller")
    want = rf"{run / 'stage2' / 'ckpt.pt'} holds non-finite weights: {name} .*re-run stage 2"
    with pytest.raises(CheckpointError, match=want):
        load_run(run)
    with pytest.raises(CheckpointError, match=want):
        load_trained_controller(_cfg(), run)


@pytest.mark.parametrize("stage", ["stage1", "stage2"])
def test_a_resume_from_a_nan_checkpoint_is_refused_not_resumed(run_dir, tmp_path, stage):
    run = _copy(run_dir, tmp_path / "fin")
    ckpt = run / stage / "ckpt.pt"
    name = _poison(ckpt, "model" if stage == "stage1" else "controller")
    more = _cfg(f"train.{stage}.steps=4")  # the checkpoint is not finished: training would resume from it
    train = train_stage1 if stage == "stage1" else train_stage2
    with pytest.raises(CheckpointError, match=rf"{ckpt} holds non-finite weights: {name} .*cannot resume from it"):
        train(more, run, progress=False)
    assert load_checkpoint(ckpt)["step"] == 2  # untouched


class _NanGrad(torch.autograd.Function):
    """Identity forward, NaN gradient: the loss stays finite while the step ruins the weights."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * float("nan")


@pytest.mark.parametrize("fault", ["loss", "grad"])
def test_a_diverging_stage1_stops_before_saving_and_names_the_last_good_checkpoint(tmp_path, monkeypatch, fault):
    """``loss``: NaN loss at step 3 (no log, no checkpoint there), caught at the step-4 checkpoint.
    ``grad``: a finite loss whose gradient is NaN at step 4, a checkpoint step: only the weights show it."""
    cfg = _cfg("train.stage1.steps=6")
    calls = [0]
    real = stage1_mod.stage1_loss

    def poisoned(logits, ids, batch, query_weight):
        loss, query = real(logits, ids, batch, query_weight)
        calls[0] += 1
        if fault == "loss" and calls[0] == 3:
            loss = loss * float("nan")
        if fault == "grad" and calls[0] == 4:
            loss = _NanGrad.apply(loss)
        return loss, query

    monkeypatch.setattr(stage1_mod, "stage1_loss", poisoned)
    ckpt = tmp_path / "stage1" / "ckpt.pt"
    what = "loss is not finite at step 4 (train_loss nan" if fault == "loss" else "weights are not finite after step 4: "
    with pytest.raises(TrainingDiverged) as info:
        train_stage1(cfg, tmp_path, progress=False)
    msg = str(info.value)
    assert msg.startswith(f"stage1 {what}") and "\n" not in msg
    assert f"{ckpt} (step 2) holds the last good weights" in msg and "train.stage1.lr" in msg
    saved = load_checkpoint(ckpt)
    assert saved["step"] == 2 and not (tmp_path / "stage1" / "base.pt").exists()
    check_finite(saved, ckpt)  # what is on disk is good
    monkeypatch.undo()
    assert train_stage1(cfg, tmp_path, progress=False)["steps"] == 6  # and resumes from it


def test_a_diverging_stage2_stops_before_saving(run_dir, tmp_path, monkeypatch):
    run = tmp_path / "run"
    (run / "stage1").mkdir(parents=True)
    shutil.copy(run_dir / "stage1" / "base.pt", run / "stage1" / "base.pt")
    cfg = _cfg("train.stage2.steps=4")
    calls = [0]
    real = MCController.run_step

    def poisoned(self, plan):
        out = real(self, plan)
        if torch.is_grad_enabled():  # training micro-steps only (validation runs without grad)
            calls[0] += 1
            if calls[0] == 3:
                out = dataclasses.replace(out, total=_NanGrad.apply(out.total))
        return out

    monkeypatch.setattr(MCController, "run_step", poisoned)
    with pytest.raises(TrainingDiverged, match=r"^stage2 loss is not finite at step 4 \(lm nan.*"
                       rf"{run / 'stage2' / 'ckpt.pt'} \(step 2\) holds the last good weights.*train.stage2.lr"):
        train_stage2(cfg, run, progress=False)
    saved = load_checkpoint(run / "stage2" / "ckpt.pt")
    assert saved["step"] == 2
    check_finite(saved, "ckpt.pt")


def test_the_guard_without_a_checkpoint_says_so():
    guard = DivergenceGuard("stage2", Path("r/stage2/ckpt.pt"), "train.stage2.lr", None)
    guard.check_loss({"lm": 1.0}, 1, 1e-3)
    with pytest.raises(TrainingDiverged, match=r"no checkpoint was written before it \(r/stage2/ckpt.pt does not exist\)"):
        guard.check_loss({"lm": float("inf")}, 1, 1e-3)
    guard.saved(5)
    with pytest.raises(TrainingDiverged, match=r"weights are not finite after step 6: w \(1 NaN/inf of 1\).*step 5"):
        guard.check_weights({"w": torch.tensor([float("nan")])}, 6)
