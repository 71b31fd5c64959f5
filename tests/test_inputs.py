"""Bad input to the public API gets one clear line: prompts, appends, train_step ids, base weights,
non-finite logits; and a resumed training stage says so. Eager tiny controller, no compile."""
from __future__ import annotations

import pytest
import torch

from _tiny_config import TINY
from mc.build import build_controller
from mc.config_loading import load_config
from mc.nets.gpt import GPT
from mc.train.checkpoint import CheckpointError


@pytest.fixture(scope="module")
def ctl():
    return build_controller(load_config(TINY), device=torch.device("cpu"))


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text, text
    return text


@pytest.mark.parametrize("prompt, needle", [
    (torch.tensor([1.7, 2.2, 3.0]), "dtype float32"),
    ([1.5, 2.0], "dtype float"),
    (torch.tensor([True, False, True]), "bool"),
    (torch.tensor([[1, 2, 3]]), "expected a 1-D sequence of token ids [n], got shape [1, 3]"),
    (torch.tensor([1, 2, 259]), "token id 259 is outside the vocabulary [0, 259)"),
    (torch.tensor([-1, 2]), "token id -1 is outside the vocabulary"),
    ("hello", "token ids must be"),
])
def test_bad_prompts_are_refused_with_one_line(ctl, prompt, needle):
    with pytest.raises(ValueError) as info:
        ctl.begin_session(prompt)
    assert needle in _one_line(info.value) and "begin_session" in str(info.value)


def test_good_prompts_and_appends_still_work_and_bad_appends_are_refused(ctl):
    s = ctl.begin_session([1, 2, 3, 4, 5])  # a plain list of ints is fine
    ctl.append(torch.tensor(7, dtype=torch.int32))  # one id, any integer dtype
    assert s.num_tokens == 6
    for bad, needle in ((torch.tensor([0.5]), "dtype float32"), (torch.tensor([[1], [2]]), "got shape [2, 1]"),
                        (torch.tensor([300]), "token id 300 is outside")):
        with pytest.raises(ValueError, match="append") as info:
            ctl.append(bad)
        assert needle in _one_line(info.value)
    assert s.num_tokens == 6  # nothing half-appended


def test_train_step_checks_its_ids(ctl):
    t = ctl.cfg.mc.history_tokens
    gen = torch.Generator().manual_seed(0)
    for bad, needle in ((torch.randint(0, 256, (t,)), "expected token ids of shape [B, T]"),
                        (torch.rand(1, t), "dtype float32"),
                        (torch.full((1, t), 999), "token id 999 is outside the vocabulary"),
                        (torch.randint(0, 256, (1, t - 1)), "mc.history_tokens")):
        with pytest.raises(ValueError, match="train_step") as info:
            ctl.train_step(bad, gen)
        assert needle in _one_line(info.value)


def test_nan_embeddings_give_an_error_not_nan_logits():
    ctl = build_controller(load_config(TINY), device=torch.device("cpu"))
    ctl.begin_session(torch.arange(20))
    assert torch.isfinite(ctl.next_token_logits()).all()
    with torch.no_grad():
        ctl.base.tok_emb.weight.fill_(float("nan"))
    ctl.begin_session(torch.arange(20))
    with pytest.raises(FloatingPointError, match="non-finite logit") as info:
        ctl.next_token_logits()
    _one_line(info.value)


def test_base_weights_garbage_or_another_shape_are_one_line_checkpoint_errors(tmp_path):
    cfg = load_config(TINY)
    garbage = tmp_path / "base.pt"
    garbage.write_bytes(b"\x80\x04garbage, not a checkpoint")
    with pytest.raises(CheckpointError, match="corrupt or truncated") as info:
        build_controller(cfg, base_weights=garbage)
    _one_line(info.value)
    other = load_config([o for o in TINY if not o.startswith("model.d_model")] + ["model.d_model=16"])
    torch.save(GPT(other.model).state_dict(), tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="do not fit this config's model") as info:
        build_controller(cfg, base_weights=tmp_path / "other.pt")
    assert "size mismatch" in _one_line(info.value) and "re-run stage 1" in str(info.value)


def test_a_resumed_stage_says_so(tmp_path, capsys):
    from mc.train.stage1 import train_stage1

    cfg = load_config([*TINY, "data=recall", "train.stage1.steps=2", "train.stage1.batch_size=1",
                       "train.stage1.eval_batches=1", "train.stage1.ckpt_every=1", "train.stage1.warmup_steps=1"])
    train_stage1(cfg, tmp_path, progress=False, stop_after=1)
    assert "resuming" not in capsys.readouterr().out  # a fresh start is not a resume
    train_stage1(cfg, tmp_path, progress=False)
    assert f"[stage1] resuming from step 1 of 2 ({tmp_path / 'stage1' / 'ckpt.pt'})" in capsys.readouterr().out
