"""Distillation from the full history (mc.distill_weight): the tails line up, the KL is zero exactly when
the working context reads like the history, and the step's total carries it to GistNet."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from mc.build import build_controller
from mc.config import ConfigError
from mc.config_checks import validate
from mc.nets.distill import distill_tail_loss, full_history_distill, full_history_tail_logits
from mc.nets.losses import tail_positions
from test_train import tiny_cfg


def _cfg(weight: float):
    cfg = tiny_cfg()
    return dataclasses.replace(cfg, mc=dataclasses.replace(cfg.mc, distill_weight=weight))


def test_kl_reads_each_rows_own_tail_and_its_own_sequence():
    gen = torch.Generator().manual_seed(0)
    b, v, w, vocab, recent = 2, 3, 10, 7, 4
    teacher = torch.randn(b, recent - 1, vocab, generator=gen)
    lengths = torch.tensor([10, 8, 6, 9, 7, 10])  # rows of sequence 0, then of sequence 1
    logits = torch.randn(b * v, w, vocab, generator=gen)
    for r, n in enumerate(lengths.tolist()):  # the tail's predictions equal the teacher's: KL 0
        logits[r, n - recent:n - 1] = teacher[r // v]
    kl = distill_tail_loss(logits, lengths, teacher, recent)
    assert kl.shape == (b * v,) and torch.allclose(kl, torch.zeros(b * v), atol=1e-6)
    bumped = logits.clone()
    bumped[4, lengths[4] - 2] += torch.randn(vocab, generator=gen) * 3  # one tail prediction of row 4 only
    kl2 = distill_tail_loss(bumped, lengths, teacher, recent)
    assert kl2[4] > 1e-3 and torch.allclose(kl2[torch.arange(6) != 4], torch.zeros(5), atol=1e-6)
    bumped = logits.clone()
    bumped[4, lengths[4] - 1] += 5.0  # the last real entry predicts past the history: not in the tail
    assert torch.allclose(distill_tail_loss(bumped, lengths, teacher, recent), kl, atol=1e-6)
    with pytest.raises(ValueError, match="do not fit recent_tokens"):
        distill_tail_loss(logits, lengths, teacher, recent + 1)


def test_kl_is_zero_for_a_working_context_that_is_the_whole_history_and_positive_for_a_compressed_one():
    cfg = _cfg(1.0)
    ctrl = build_controller(cfg, device="cpu")
    t, recent = cfg.mc.history_tokens, cfg.mc.recent_tokens
    ids = torch.randint(0, 256, (2, t), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        embeds = ctrl.base.embed(ids)  # [2, T, D]
        pad = 6  # the student row padded past its real entries, as bucketed working contexts are
        wc = torch.cat([embeds, torch.zeros(2, pad, embeds.shape[-1])], 1)
        positions = torch.arange(t + pad).expand(2, -1)
        mask = positions < t
        lengths = torch.full((2,), t)
        student = ctrl.base_logits(wc, positions, torch.zeros_like(positions), mask,
                                   logit_index=tail_positions(lengths, recent))  # the step's own tail logits
        same = full_history_distill(ctrl.base_logits, embeds, student, recent)
        assert torch.allclose(same, torch.zeros(2), atol=1e-6)
        # the same tail after a history whose first half is gone: the teacher saw more than the student
        short = ctrl.base_logits(embeds[:, t // 2:], positions[:, t // 2:t], torch.zeros(2, t - t // 2, dtype=torch.long),
                                 torch.ones(2, t - t // 2, dtype=torch.bool))
        kl = distill_tail_loss(short, torch.full((2,), t - t // 2), full_history_tail_logits(ctrl.base_logits, embeds,
                                                                                          recent), recent)
        assert (kl > 1e-5).all() and (kl > 20 * same.abs()).all()  # small: an untrained base reads little far back


def test_the_step_adds_the_weighted_kl_and_it_reaches_gistnet():
    ids = torch.randint(0, 256, (2, 64), generator=torch.Generator().manual_seed(2))
    outs = {}
    for weight in (0.0, 2.0):
        ctrl = build_controller(_cfg(weight), device="cpu")
        torch.nn.init.normal_(ctrl.gistnet.out_proj.weight, std=0.1)  # gists well away from the plain mean
        torch.manual_seed(0)
        out = ctrl.train_step(ids, torch.Generator().manual_seed(3))
        out.total.backward()
        outs[weight] = (out.total.detach(), out.lm_loss.detach(),
                        ctrl.gistnet.out_proj.weight.grad.clone())
        ctrl.end_micro_step()
    (t0, lm0, g0), (t2, lm2, g2) = outs[0.0], outs[2.0]
    assert torch.equal(lm0, lm2)  # same draws, same gists: the KL is the only difference
    assert t2 > t0 + 1e-4 and not torch.allclose(g0, g2)


def test_bad_weights_and_a_history_past_the_window_are_refused():
    with pytest.raises(ConfigError, match="mc.distill_weight"):
        validate(_cfg(-1.0))
    cfg = _cfg(1.0)
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, max_seq_len=32))
    with pytest.raises(ConfigError, match=r"history_tokens \(64\) <= model.max_seq_len \(32\)"):
        validate(cfg)
