"""Training loops, checkpoints and stage-2 gradient flow on tiny configs built in code (no Hydra)."""
from __future__ import annotations

import copy
import dataclasses
import os
import shutil

import pytest
import torch

from mc.build import build_controller
from mc.config import (DataConfig, EvalConfig, GistNetConfig, LensNetConfig, MCConfig, ModelConfig, RecallConfig,
                       RunConfig, StageConfig, TelemetryConfig, TrainConfig)
from mc.nets.gpt import GPT
from mc.train.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from mc.data.recall import fit_recall
from mc.train.common import read_metrics
from mc.train.optim import lr_at, make_optimizer
from mc.train.stage1 import train_stage1
from mc.train import stage2 as stage2_module
from mc.train.stage2 import train_stage2


def tiny_cfg(*, freeze_base: bool = True, s1_steps: int = 4, s2_steps: int = 4) -> RunConfig:
    stage1 = StageConfig(steps=s1_steps, batch_size=2, lr=3e-3, warmup_steps=1, eval_every=2, eval_batches=1, ckpt_every=2)
    stage2 = StageConfig(steps=s2_steps, batch_size=2, grad_accum=2, lr=1e-3, warmup_steps=1, eval_every=2,
                         eval_batches=1, ckpt_every=2)
    return RunConfig(
        model=ModelConfig(d_model=32, n_layers=1, n_heads=2, max_seq_len=64),
        gistnet=GistNetConfig(d_model=16, n_layers=1, n_heads=2),
        lensnet=LensNetConfig(d_model=16, n_layers=1, n_heads=2),
        mc=MCConfig(block_size=4, max_lod=2, max_entries=32, recent_tokens=8, bucket_ladder=[16, 32],
                    gist_bucket_ladder=[1, 4], history_tokens=64, n_random_variants=2, freeze_base=freeze_base),
        data=DataConfig(source="recall", recall=RecallConfig(doc_tokens=64, n_records=2, key_len=2, value_len=2)),
        eval=EvalConfig(tail_tokens=8),
        train=TrainConfig(device="cpu", seed=3, stage1=stage1, stage2=stage2),
        telemetry=TelemetryConfig(jsonl=False),
    )


def _stage2_grads(cfg: RunConfig):
    """Two micro-steps: the first with an optimiser step, so GistNet's zero-initialised output
    projection is non-zero and gradient can reach everything upstream of it."""
    ctrl = build_controller(cfg, device=torch.device("cpu"))
    opt = make_optimizer(ctrl.aux_parameters(), cfg.train.stage2)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 256, (2, cfg.mc.history_tokens), generator=gen)
    for _ in range(2):
        ctrl.zero_grad(opt)
        out = ctrl.train_step(ids, gen)
        out.total.backward()
        ctrl.end_micro_step()
        if _ == 0:
            opt.step()
    return ctrl, out


def _nonzero(p) -> bool:
    return p.grad is not None and bool(torch.isfinite(p.grad).all()) and bool(p.grad.abs().sum() > 0)


def test_stage2_gradient_reaches_every_aux_param_and_not_frozen_base():
    ctrl, out = _stage2_grads(tiny_cfg())
    assert float(out.preference.active_entries) > 0, "no preference signal: the gradient test would be vacuous"
    missing = [f"gistnet.{n}" for n, p in ctrl.gistnet.named_parameters() if not _nonzero(p)]
    missing += [f"lensnet.{n}" for n, p in ctrl.lensnet.named_parameters() if not _nonzero(p)]
    assert not missing, f"no gradient reached: {missing}"
    assert all(p.grad is None for p in ctrl.base.parameters()), "frozen base received gradient"
    assert all(not p.requires_grad for p in ctrl.base.parameters())


def test_focus_loss_and_guided_variants_reach_lensnet_through_train_step():
    """The long preset's stage-2 additions run through the public train_step: with a record span the
    focus loss adds to the total (and its gradient reaches LensNet); without spans it is absent."""
    cfg = tiny_cfg()
    cfg.mc.n_random_variants, cfg.mc.guided_variants, cfg.mc.focus_loss_weight = 3, 2, 1.0
    ctrl = build_controller(cfg, device=torch.device("cpu"))
    ids = torch.randint(0, 256, (2, cfg.mc.history_tokens), generator=torch.Generator().manual_seed(0))
    spans = [(4, 10), None]
    with_span = ctrl.train_step(ids, torch.Generator().manual_seed(1), spans)
    without = ctrl.train_step(ids, torch.Generator().manual_seed(1), [None, None])
    extra = float((with_span.total - with_span.lm_loss - cfg.mc.lens_loss_weight * with_span.preference.loss).detach())
    assert extra > 0.1  # an untrained LensNet spreads its softmax over the gists: log(#gists)-ish
    gap = float((without.total - without.lm_loss - cfg.mc.lens_loss_weight * without.preference.loss).detach())
    assert abs(gap) < 1e-6
    ctrl.zero_grad(make_optimizer(ctrl.aux_parameters(), cfg.train.stage2))
    (with_span.total - with_span.lm_loss - cfg.mc.lens_loss_weight * with_span.preference.loss).backward()
    assert any(_nonzero(p) for p in ctrl.lensnet.parameters())
    ctrl.end_micro_step()
    with pytest.raises(ValueError, match="focus spans"):
        ctrl.train_step(ids, torch.Generator(), [(4, 10)])


def test_decoy_spans_reach_the_variants_through_prepare_step():
    """mc.decoy_variants: the public prepare_step takes per-row decoy spans; the variant after the guided
    one holds a decoy record at LOD0 on the row that has one, and a row without decoys draws as before."""
    cfg = tiny_cfg()
    cfg.mc.n_random_variants, cfg.mc.guided_variants, cfg.mc.decoy_variants = 3, 1, 1
    ctrl = build_controller(cfg, device=torch.device("cpu"))
    t = cfg.mc.history_tokens
    ids = torch.randint(0, 256, (2, t), generator=torch.Generator().manual_seed(0))
    focus, decoy = (4, 10), (t // 2, t // 2 + 6)
    plan = ctrl.prepare_step(ids, torch.Generator().manual_seed(1), [focus, focus], decoy_spans=[[decoy], []])
    lod_map = plan.lod_map  # [B, V, T]
    assert lod_map[0, 1, focus[0]:focus[1]].eq(0).all() and lod_map[0, 2, decoy[0]:decoy[1]].eq(0).all()
    assert lod_map[0, 2, focus[0]:focus[1]].gt(0).any()  # the decoy layout leaves the queried record coarse
    plain_cfg = copy.deepcopy(cfg)
    plain_cfg.mc.decoy_variants = 0
    plain = build_controller(plain_cfg, device=torch.device("cpu")).prepare_step(ids, torch.Generator().manual_seed(1),
                                                                           [focus, focus])
    assert torch.equal(plain.lod_map[0, :2], lod_map[0, :2])  # the guided draws come first, unchanged
    assert plan.decoy.tolist() == [[False, False, True, False], [False, False, False, False]]
    # decoys feed the focus loss only: the LM loss is the mean tail loss of the other layouts
    out = ctrl.run_step(plan)
    tails = out.tail_losses
    assert torch.allclose(out.lm_loss.detach(), torch.cat([tails[0, [0, 1, 3]], tails[1]]).mean())
    ctrl.end_micro_step()
    with pytest.raises(ValueError, match="decoy span lists"):
        ctrl.prepare_step(ids, torch.Generator(), [focus, focus], decoy_spans=[[decoy]])


def test_stage2_unfrozen_base_gets_gradient():
    ctrl, _ = _stage2_grads(tiny_cfg(freeze_base=False))
    base_params = {id(p) for p in ctrl.base.parameters()}
    assert base_params <= {id(p) for p in ctrl.aux_parameters()}
    missing = [n for n, p in ctrl.base.named_parameters() if not _nonzero(p)]
    assert not missing, f"unfrozen base parameters without gradient: {missing}"


def test_lr_schedule_warmup_then_cosine():
    st = StageConfig(steps=100, lr=1.0, warmup_steps=10)
    assert lr_at(0, st) == pytest.approx(0.1) and lr_at(9, st) == pytest.approx(1.0)
    assert lr_at(10, st) == pytest.approx(1.0)
    assert lr_at(99, st) < lr_at(50, st) < lr_at(10, st)
    assert lr_at(100, st) == pytest.approx(0.1)  # floor of the cosine (MIN_LR_RATIO)


def test_fit_recall_drops_records_for_short_sequences():
    rc = fit_recall(RecallConfig(doc_tokens=2048, n_records=8), 128)
    assert rc.doc_tokens == 128 and 1 <= rc.n_records < 8


# ----------------------------------------------------------------------------- checkpoints


def test_atomic_save_leaves_no_tmp_and_keeps_old_file_on_failure(tmp_path):
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, {"step": 1, "w": torch.ones(3)})
    assert sorted(os.listdir(tmp_path)) == ["ckpt.pt"]
    with pytest.raises(Exception):
        save_checkpoint(path, {"step": 2, "bad": lambda: None})  # unpicklable: fails mid-write
    assert sorted(os.listdir(tmp_path)) == ["ckpt.pt"], "a failed save left a temporary file"
    assert load_checkpoint(path)["step"] == 1, "a failed save damaged the previous checkpoint"


def test_corrupt_or_missing_checkpoint_gives_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        load_checkpoint(tmp_path / "nope.pt")
    good = tmp_path / "good.pt"
    save_checkpoint(good, {"step": 1, "w": torch.randn(1000)})
    truncated = tmp_path / "trunc.pt"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    for bad in (truncated, tmp_path / "garbage.pt", tmp_path / "empty.pt"):
        if bad.name == "garbage.pt":
            bad.write_bytes(b"this is not a checkpoint")
        elif bad.name == "empty.pt":
            bad.write_bytes(b"")
        with pytest.raises(CheckpointError, match=str(bad.name)):
            load_checkpoint(bad)


# ----------------------------------------------------------------------------- stage 1


def test_stage1_runs_writes_base_and_metrics_and_skips_when_done(tmp_path):
    cfg = tiny_cfg()
    summary = train_stage1(cfg, tmp_path, progress=False)
    assert summary["steps"] == 4 and not summary["skipped"]
    base = tmp_path / "stage1" / "base.pt"
    GPT(cfg.model).load_state_dict(load_checkpoint(base))  # weights only, loadable as-is
    recs = read_metrics(tmp_path / "stage1" / "metrics.jsonl")
    # stage 1 logs every min(eval_every, 10) steps (here 2), always with val_loss on eval steps
    assert [r["step"] for r in recs] == [2, 4]
    assert all({"train_loss", "lr", "tokens_per_s", "val_loss"} <= r.keys() for r in recs)
    ck = load_checkpoint(tmp_path / "stage1" / "ckpt.pt")
    assert ck["step"] == 4 and {"model", "optimizer", "rng", "config"} <= ck.keys()
    again = train_stage1(cfg, tmp_path, progress=False)
    assert again["skipped"] and again["steps"] == 4


def test_stage1_resume_continues_exactly(tmp_path):
    cfg = tiny_cfg(s1_steps=4)
    full, part = tmp_path / "full", tmp_path / "part"
    train_stage1(cfg, full, progress=False)
    s = train_stage1(cfg, part, progress=False, stop_after=2)
    assert s["steps"] == 2 and not (part / "stage1" / "base.pt").exists()
    assert load_checkpoint(part / "stage1" / "ckpt.pt")["step"] == 2
    stale = part / "stage1" / ".ckpt.pt.killed.tmp"  # what a run killed inside save_checkpoint leaves
    stale.write_bytes(b"half a checkpoint")
    train_stage1(cfg, part, progress=False)  # resumes at step 2
    assert not [p.name for p in (part / "stage1").iterdir() if p.name.endswith(".tmp")], "resume left a stale tmp"
    a = read_metrics(full / "stage1" / "metrics.jsonl")
    b = read_metrics(part / "stage1" / "metrics.jsonl")
    assert [r["step"] for r in b] == [2, 4], "resume duplicated or lost metric lines"
    for ra, rb in zip(a, b):
        assert rb["train_loss"] == pytest.approx(ra["train_loss"], abs=1e-6)
    wa, wb = load_checkpoint(full / "stage1" / "base.pt"), load_checkpoint(part / "stage1" / "base.pt")
    assert all(torch.allclose(wa[k], wb[k], atol=1e-6) for k in wa)


# ----------------------------------------------------------------------------- stage 2


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("s1")
    train_stage1(tiny_cfg(s1_steps=2), d, progress=False)
    return d


def _with_base(base_dir, dest):
    (dest / "stage1").mkdir(parents=True)
    shutil.copy(base_dir / "stage1" / "base.pt", dest / "stage1" / "base.pt")
    return dest


def test_stage2_checkpoint_holds_both_aux_nets_and_optimizer(base_dir, tmp_path):
    cfg = tiny_cfg(s2_steps=2)
    run = _with_base(base_dir, tmp_path / "run")
    summary = train_stage2(cfg, run, progress=False)
    assert summary["steps"] == 2
    ck = load_checkpoint(run / "stage2" / "ckpt.pt")
    assert {"controller", "optimizer", "step", "rng", "config"} <= ck.keys() and ck["step"] == 2
    ctrl = build_controller(cfg, device=torch.device("cpu"))
    assert set(ck["controller"]) == {"gistnet", "lensnet"}  # frozen base is not stage-2 state
    assert set(ck["controller"]["gistnet"]) == set(ctrl.gistnet.state_dict())
    assert set(ck["controller"]["lensnet"]) == set(ctrl.lensnet.state_dict())
    n_params = len(ctrl.aux_parameters())
    assert len(ck["optimizer"]["state"]) == n_params, "optimizer state does not cover every aux parameter"
    assert "data" in ck["rng"] and "torch" in ck["rng"]
    recs = read_metrics(run / "stage2" / "metrics.jsonl")
    keys = {"lm_loss", "pref_loss", "pref_acc", "baseline_loss", "best_loss", "gap", "lr", "seq_per_s"}
    assert [r["step"] for r in recs] == [1, 2] and all(keys <= r.keys() for r in recs)
    assert "val_lm_loss" in recs[-1]
    assert train_stage2(cfg, run, progress=False)["skipped"]


def test_stage2_save_load_continue_matches_uninterrupted(base_dir, tmp_path):
    cfg = tiny_cfg(s2_steps=4)
    full = _with_base(base_dir, tmp_path / "full")
    part = _with_base(base_dir, tmp_path / "part")
    train_stage2(cfg, full, progress=False)
    train_stage2(cfg, part, progress=False, stop_after=2)
    assert load_checkpoint(part / "stage2" / "ckpt.pt")["step"] == 2
    train_stage2(cfg, part, progress=False)  # a new controller + optimizer, restored from the checkpoint
    a = read_metrics(full / "stage2" / "metrics.jsonl")
    b = read_metrics(part / "stage2" / "metrics.jsonl")
    assert [r["step"] for r in b] == [1, 2, 3, 4]
    for ra, rb in zip(a[2:], b[2:]):  # the steps after the restart
        for k in ("lm_loss", "pref_loss", "baseline_loss"):
            assert abs(ra[k] - rb[k]) <= 1e-6, f"step {ra['step']} {k}: {ra[k]} vs {rb[k]} after resume"
    ca = load_checkpoint(full / "stage2" / "ckpt.pt")["controller"]
    cb = load_checkpoint(part / "stage2" / "ckpt.pt")["controller"]
    for net in ("gistnet", "lensnet"):
        for k, v in ca[net].items():
            assert torch.allclose(v, cb[net][k], atol=1e-6), f"{net}.{k} differs after resume"


def test_corrupt_base_weights_give_the_checkpoint_error(tmp_path):
    (tmp_path / "stage1").mkdir()
    (tmp_path / "stage1" / "base.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="base.pt is corrupt"):  # build loads through load_checkpoint
        build_controller(tiny_cfg(), device=torch.device("cpu"), base_weights=tmp_path / "stage1" / "base.pt")


def test_stage2_needs_base_weights(tmp_path):
    with pytest.raises(FileNotFoundError, match="stage 1"):
        train_stage2(tiny_cfg(), tmp_path, progress=False)


def test_resume_with_other_model_shape_is_refused(base_dir, tmp_path):
    cfg = tiny_cfg(s2_steps=2)
    run = _with_base(base_dir, tmp_path / "run")
    train_stage2(cfg, run, progress=False, stop_after=1)
    other = dataclasses.replace(cfg, lensnet=LensNetConfig(d_model=32, n_layers=1, n_heads=2))
    with pytest.raises(ValueError, match="lensnet"):
        train_stage2(other, run, progress=False)


def test_resume_with_another_lr_is_a_config_error_naming_the_old_value(base_dir, tmp_path):
    """A changed learning rate on resume is a ConfigError (run10.sh prints it in one line, no traceback) that
    names the key, the checkpoint's value and the ways out; steps may change."""
    from mc.config import ConfigError  # noqa: PLC0415

    cfg = tiny_cfg(s2_steps=2)
    run = _with_base(base_dir, tmp_path / "run")
    train_stage2(cfg, run, progress=False, stop_after=1)
    lr = cfg.train.stage2.lr
    other = dataclasses.replace(cfg, train=dataclasses.replace(
        cfg.train, stage2=dataclasses.replace(cfg.train.stage2, lr=2 * lr)))
    with pytest.raises(ConfigError, match=rf"then lr={lr!r}.*set them back.*delete"):
        train_stage2(other, run, progress=False)
    longer = dataclasses.replace(cfg, train=dataclasses.replace(
        cfg.train, stage2=dataclasses.replace(cfg.train.stage2, steps=3)))
    train_stage2(longer, run, progress=False)  # steps may change on resume


def test_a_checkpoint_from_before_a_key_existed_resumes(base_dir, tmp_path):
    """A stage-2 checkpoint whose config lacks a key added to the code since (here mc.focus_loss_weight)
    resumes when the key holds its default, and is refused when it does not."""
    from mc.train.checkpoint import load_checkpoint, save_checkpoint  # noqa: PLC0415

    cfg = tiny_cfg(s2_steps=2)
    run = _with_base(base_dir, tmp_path / "run")
    train_stage2(cfg, run, progress=False, stop_after=1)
    path = run / "stage2" / "ckpt.pt"
    saved = load_checkpoint(path)
    del saved["config"]["mc"]["focus_loss_weight"]
    save_checkpoint(path, saved)
    moved = dataclasses.replace(cfg, mc=dataclasses.replace(cfg.mc, focus_loss_weight=0.5))
    with pytest.raises(ValueError, match="focus_loss_weight"):
        train_stage2(moved, run, progress=False)
    assert train_stage2(cfg, run, progress=False)["steps"] == 2


def test_stage2_history_mix_draws_each_length_and_resumes_exactly(base_dir, tmp_path, monkeypatch):
    """`mc.history_mix`: each micro-step trains on one of the listed lengths, drawn from the data generator, so
    a resumed run draws the same ones and ends where the uninterrupted run does."""
    cfg = tiny_cfg(s2_steps=4)
    cfg.mc.history_mix = [48, 64]
    drawn = []
    real = stage2_module.history_length
    monkeypatch.setattr(stage2_module, "history_length", lambda mc, gen: drawn.append(real(mc, gen)) or drawn[-1])
    full = _with_base(base_dir, tmp_path / "full")
    part = _with_base(base_dir, tmp_path / "part")
    train_stage2(cfg, full, progress=False)
    assert set(drawn) == {48, 64}, f"8 micro-steps drew lengths {drawn}"
    first, drawn[:] = list(drawn), []
    train_stage2(cfg, part, progress=False, stop_after=2)
    train_stage2(cfg, part, progress=False)
    assert drawn[:4] == first[:4] and drawn[-4:] == first[-4:], "a resumed run draws other lengths"
    a, b = (read_metrics(r / "stage2" / "metrics.jsonl") for r in (full, part))
    for ra, rb in zip(a[2:], b[2:]):
        assert abs(ra["lm_loss"] - rb["lm_loss"]) <= 1e-6, f"step {ra['step']} differs after resume"


def test_train_step_takes_the_mix_lengths_only():
    cfg = tiny_cfg()
    cfg.mc.history_mix = [48]
    ctrl = build_controller(cfg, device=torch.device("cpu"))
    gen = torch.Generator().manual_seed(0)
    plan = ctrl.prepare_step(torch.randint(0, 256, (2, 48), generator=gen), gen)
    assert plan.lod_map.shape[-1] == 48 and int(plan.lengths.max()) <= cfg.mc.max_entries
    with pytest.raises(ValueError, match=r"32 tokens.*history_tokens=64 and mc.history_mix=\[48\]"):
        ctrl.prepare_step(torch.randint(0, 256, (2, 32), generator=gen), gen)
