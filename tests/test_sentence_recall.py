"""Sentence records (data.recall.form=sentence, mc.data.sentence_recall): recall documents for a real model's
tokenizer, the training-side twin of the task suite's needles and disjoint from them."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from mc.config import ConfigError, DataConfig, RecallConfig, RunConfig
from mc.config_checks import validate
from mc.data.loader import Stage2Sampler, corpus_haystack, make_source
from mc.data.real_tasks import KEY_WORDS
from mc.data.recall import fit_recall, make_recall_doc
from mc.data.sentence_recall import NAMES, PHRASINGS, answer_ids, make_sentence_doc
from mc.data.tokenizer import ByteTokenizer

TOK = ByteTokenizer()
MAX_FILES = 150  # the stdlib's first files: enough filler, quick to scan
SENT = RecallConfig(form="sentence", doc_tokens=512, n_records=2, value_len=5, records_region=0.7, haystack="corpus")


@pytest.fixture(scope="module")
def haystack():
    return corpus_haystack(DataConfig(recall=SENT), "train", TOK, max_files=MAX_FILES)


def _check(doc, cfg):
    text = lambda a, b: TOK.decode(doc.ids[a:b])  # noqa: E731
    assert doc.ids.numel() == cfg.doc_tokens and int(doc.ids[0]) == TOK.bos_id
    assert len(doc.record_spans) == cfg.n_records and len(set(doc.keys)) == cfg.n_records
    region = int(cfg.doc_tokens * cfg.records_region)
    for (a, b), k, v in zip(doc.record_spans, doc.keys, doc.values):
        assert text(a, b) == "\n" + doc.template.format(k=k, v=v) + "\n"  # the sentence, whole, where the span says
        assert b <= region and len(v) == cfg.value_len and v.isdigit()
    a0, a1 = doc.answer_span
    assert (a0, a1) == (cfg.doc_tokens - cfg.value_len, cfg.doc_tokens) and text(a0, a1) == doc.answer
    question = next(q for r, q in PHRASINGS if r == doc.template)
    assert text(doc.query_start, a0) == question.format(k=doc.keys[doc.answer_record]) + " "
    assert doc.queried_span == doc.record_spans[doc.answer_record]
    with pytest.raises(ValueError, match="sentence"):  # the record-form helper refuses rather than misplace the value
        doc.value_span(0)


@pytest.mark.parametrize("filler", ["words", "corpus"])
def test_documents_hold_sentences_question_and_answer(filler, haystack):
    cfg = dataclasses.replace(SENT, haystack=filler)
    hay = haystack if filler == "corpus" else None
    docs = [make_recall_doc(cfg, s, TOK, hay) for s in range(40)]
    for d in docs:
        _check(d, cfg)
    assert {d.template for d in docs} == {r for r, _ in PHRASINGS}  # every phrasing is drawn
    assert {d.answer_record for d in docs} == {0, 1}
    with pytest.raises(ValueError, match="form=sentence draws its phrasings"):  # a record template is not silently dropped
        make_recall_doc(cfg, 7, TOK, hay, template="{k}={v}")
    again = make_recall_doc(cfg, 7, TOK, hay)
    assert torch.equal(again.ids, docs[7].ids) and again.record_spans == docs[7].record_spans


def test_sentences_are_disjoint_from_the_task_suite():
    """The suite's needles stay a held-out form: no phrase of theirs, no key word of theirs."""
    for record, question in PHRASINGS:
        for text in (record, question):
            low = text.lower()
            assert "pass key" not in low and "magic number" not in low and "var " not in low
    assert not {n.lower() for n in NAMES} & {k.lower() for k in KEY_WORDS}


def test_stage2_rows_carry_the_queried_sentence(haystack):
    data = DataConfig(recall=SENT)
    sampler = Stage2Sampler(make_source(data, "train", max_files=MAX_FILES), SENT, 0.5, "train", TOK)
    batch = sampler.sample(4, 512, torch.Generator().manual_seed(1))
    assert batch.is_recall.tolist() == [True, True, False, False]
    for row, (span, doc) in enumerate(zip(batch.queried_spans(), batch.recall_docs)):
        if doc is None:
            assert span is None
            continue
        _check(doc, SENT)
        assert span == doc.queried_span and torch.equal(batch.tokens[row], doc.ids)
        assert batch.other_record_spans()[row] == tuple(sp for i, sp in enumerate(doc.record_spans)
                                                         if i != doc.answer_record)


def test_short_documents_fit_fewer_records_or_refuse(haystack):
    cfg = dataclasses.replace(SENT, haystack="words")
    with pytest.raises(ValueError, match="do not fit"):
        make_sentence_doc(dataclasses.replace(cfg, doc_tokens=96), 0, TOK)
    fitted = fit_recall(dataclasses.replace(cfg, n_records=30), 512)  # 30 > the names: fit drops records
    assert fitted.n_records == len(NAMES)


def test_digits_must_be_one_token_each():
    class MergesDigits(ByteTokenizer):
        def encode_body(self, text):
            return [ord(c) if not c.isdigit() else 1000 for c in text.rstrip("0123456789")] + (
                [1000] if text[-1:].isdigit() else [])

    with pytest.raises(ValueError, match="one token per digit"):
        answer_ids(MergesDigits(), "12345")
    assert TOK.decode(answer_ids(TOK, "12345")) == " 12345"


def test_bad_sentence_configs_are_refused_at_start_up():
    def check(**recall):
        cfg = RunConfig()
        cfg.data.recall = dataclasses.replace(cfg.data.recall, **recall)
        validate(cfg)

    check(form="sentence", doc_tokens=512, n_records=2, value_len=5)  # valid
    with pytest.raises(ConfigError, match="data.recall.form"):
        check(form="sentences")
    with pytest.raises(ConfigError, match="eval_template"):
        check(form="sentence", eval_template="{k} is {v}")
    with pytest.raises(ConfigError, match="names"):
        check(form="sentence", n_records=len(NAMES) + 1)
    with pytest.raises(ConfigError, match="value_len"):
        check(form="sentence", value_len=13)
