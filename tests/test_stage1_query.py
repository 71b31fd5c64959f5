"""Stage 1's query loss (``data.recall.stage1_query_weight``): which tokens it covers, how it enters the
objective, its config check, and the ``val_query_loss`` diagnostic in the metrics."""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from mc.config import ConfigError
from mc.config_checks import validate
from mc.data.loader import Stage2Sampler
from mc.nets.gpt import GPT, next_token_loss
from mc.train.common import read_metrics
from mc.train.stage1 import query_mask, stage1_loss, train_stage1
from test_train import tiny_cfg


def _batch(cfg, n=6, shifted=0, mix=0.5):
    sampler = Stage2Sampler(None, cfg.data.recall, mix, "train", shifted_min=shifted) if mix == 1.0 else None
    if sampler is None:  # corpus rows from a stand-in source: only their spans (-1) matter here
        class Filler:
            def sample_batch(self, b, t, generator=None):
                return torch.randint(0, 200, (b, t), generator=generator)
        sampler = Stage2Sampler(Filler(), cfg.data.recall, mix, "train", shifted_min=shifted)
    return sampler.sample(n, cfg.model.max_seq_len, torch.Generator().manual_seed(0))


@pytest.mark.parametrize("shifted", [0, 40])
def test_query_mask_covers_key_equals_and_answer_of_recall_rows_only(shifted):
    cfg = tiny_cfg()
    batch = _batch(cfg, shifted=shifted)
    mask = query_mask(batch, cfg.model.max_seq_len)  # [B, T]
    rc = cfg.data.recall
    assert batch.is_recall.any() and (~batch.is_recall).any()
    for r in range(mask.shape[0]):
        if not batch.is_recall[r]:
            assert not mask[r].any()
            continue
        doc = batch.recall_docs[r]
        on = mask[r].nonzero().flatten().tolist()
        assert on == list(range(doc.query_start, doc.answer_span[1]))
        assert len(on) == rc.key_len + 1 + rc.value_len
        key = "".join(chr(int(t)) for t in batch.tokens[r, doc.query_start:doc.query_start + rc.key_len])
        assert key == doc.keys[doc.answer_record]  # the masked tokens start at the queried key's letters


def test_query_mask_leaves_out_a_drawn_separator():
    """With ``{k}{s}{v}`` documents the mask covers the key and the answer, not the separator the query repeats;
    rows with a fixed template keep the whole query."""
    cfg = tiny_cfg()
    cfg.data.recall.templates = ["{k}={v}", "{k}{s}{v}"]
    cfg.data.recall.n_records = 1  # the longest separator must fit tiny_cfg's 16-token records region
    batch = _batch(cfg, n=12, mix=1.0)
    mask = query_mask(batch, cfg.model.max_seq_len)
    kinds = set()
    for r, doc in enumerate(batch.recall_docs):
        on = mask[r].nonzero().flatten().tolist()
        key, (a0, a1) = doc.keys[doc.answer_record], doc.answer_span
        if doc.query_separator is None:
            kinds.add("fixed")
            assert doc.template == "{k}={v}" and on == list(range(doc.query_start, a1))
            continue
        kinds.add("drawn")
        s0, s1 = doc.query_separator
        sep = doc.template[len("{k}"):-len("{v}")]
        assert "".join(chr(int(t)) for t in batch.tokens[r, s0:s1]) == sep and s1 == a0
        assert on == list(range(doc.query_start, doc.query_start + len(key))) + list(range(a0, a1))
    assert kinds == {"fixed", "drawn"}


def test_stage1_loss_adds_the_weighted_query_term_and_is_plain_lm_when_off():
    cfg = tiny_cfg()
    batch = _batch(cfg)
    torch.manual_seed(0)
    model = GPT(cfg.model)
    logits = model(batch.tokens)
    plain, none = stage1_loss(logits, batch.tokens, batch, 0.0)
    assert none is None and torch.equal(plain, next_token_loss(logits, batch.tokens))
    weighted, query = stage1_loss(logits, batch.tokens, batch, 2.5)
    by_hand = next_token_loss(logits, batch.tokens, query_mask(batch, batch.tokens.shape[1]))
    assert torch.allclose(query, by_hand)
    assert torch.allclose(weighted, plain + 2.5 * by_hand)
    # the query term differs from the whole-row mean: it is the loss on ~6 of 64 tokens, not a rescaling
    assert not torch.allclose(query, plain)
    # one cross-entropy serves both means: the gradient is that of the two losses computed apart
    leaf = logits.detach().requires_grad_()
    grad_one, = torch.autograd.grad(stage1_loss(leaf, batch.tokens, batch, 2.5)[0], leaf)
    apart = next_token_loss(leaf, batch.tokens) + 2.5 * next_token_loss(
        leaf, batch.tokens, query_mask(batch, batch.tokens.shape[1]))
    grad_apart, = torch.autograd.grad(apart, leaf)
    assert torch.allclose(grad_one, grad_apart, atol=1e-7)
    # no recall row: the query term is 0 (nothing to average), the objective the plain loss
    corpus = _batch(cfg, mix=0.0)
    logits_c = model(corpus.tokens)
    objective, query_c = stage1_loss(logits_c, corpus.tokens, corpus, 2.5)
    assert float(query_c.detach()) == 0.0 and torch.allclose(objective, next_token_loss(logits_c, corpus.tokens))


@pytest.mark.parametrize("bad", [-0.5, float("nan"), True, "1", 1e4])
def test_bad_query_weight_is_a_config_error(bad):
    cfg = tiny_cfg()
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, recall=dataclasses.replace(
        cfg.data.recall, stage1_query_weight=bad)))
    with pytest.raises(ConfigError, match="data.recall.stage1_query_weight"):
        validate(cfg)


def test_stage1_logs_val_query_loss_and_the_weight_changes_training(tmp_path):
    cfg = tiny_cfg()
    off = train_stage1(cfg, tmp_path / "off", progress=False)
    on_cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, recall=dataclasses.replace(
        cfg.data.recall, stage1_query_weight=1.0)))
    on = train_stage1(on_cfg, tmp_path / "on", progress=False)
    for run, summary in (("off", off), ("on", on)):
        recs = [r for r in read_metrics(tmp_path / run / "stage1" / "metrics.jsonl") if "val_loss" in r]
        assert recs and all(math.isfinite(r["val_query_loss"]) and r["val_query_loss"] > 0 for r in recs)
        assert summary["val_query_loss"] == recs[-1]["val_query_loss"]
    # same seed and batches; only the objective differs, so the weights (and the validation losses) do
    assert on["val_query_loss"] != off["val_query_loss"]
