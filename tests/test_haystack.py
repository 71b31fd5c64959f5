"""Haystacks, record templates, key lengths and near-miss decoys (mc.data.haystack): documents where a
trivial "find the unusual text" rule no longer finds the record."""
from __future__ import annotations

import dataclasses
import hashlib

import pytest
import torch

from mc.config import ConfigError, DataConfig, RecallConfig, RunConfig
from mc.config_checks import validate
from mc.data.haystack import (SEPARATOR_MAX_LEN, check_template, choose_template, draw_separator, occurrences, query_prefix,
                              realize_template, record_len, record_text)
from mc.data.long_tasks import make_long_doc
from mc.data.loader import Stage2Sampler, corpus_haystack, make_source
from mc.data.recall import make_recall_doc, make_shifted_recall_doc
from mc.data.tokenizer import ByteTokenizer

TOK = ByteTokenizer()
TEMPLATES = ["{k}={v}", "{k}: {v}", "{k} -> {v}", "set {k} to {v}"]
HARD = RecallConfig(doc_tokens=128, n_records=1, key_len=2, value_len=3, records_region=0.4, haystack="corpus",
                    templates=TEMPLATES, eval_template="{k} is {v}", key_lens=[2, 3], near_decoys=True)
MAX_FILES = 150  # the stdlib's first files: enough text for filler, quick to scan


@pytest.fixture(scope="module")
def haystacks():
    data = DataConfig(recall=HARD)
    return {s: corpus_haystack(data, s, TOK, max_files=MAX_FILES) for s in ("train", "val")}


def _check_doc(doc, *, unambiguous: bool = True):
    """Spans, query and answer agree with the document's own keys, values and template."""
    text = lambda a, b: TOK.decode(doc.ids[a:b])  # noqa: E731
    for (a, b), k, v in zip(doc.record_spans, doc.keys, doc.values):
        assert text(a, b) == record_text(doc.template, k, v)
        if unambiguous:  # the record's prefix appears before the query only at the record
            assert occurrences(doc.ids, TOK.char_ids(query_prefix(doc.template, k)), doc.query_start) == [a]
    key, value = doc.keys[doc.answer_record], doc.answer
    assert text(doc.query_start, doc.num_tokens) == query_prefix(doc.template, key) + value
    assert TOK.decode(doc.answer_ids()) == value and text(doc.query_start - 1, doc.query_start) == "\n"


@pytest.mark.parametrize("bad", ["{v}={k}", "{k}{v}", "{k}={v}.", "{k}={v}{v}", "x={v}", "{k}\n{v}", "{k}={v}}", 7,
                                 "{s}{k}={v}", "{k}{s}{s}{v}", "{k}{s}{v}{s}"])
def test_bad_templates_are_refused(bad):
    with pytest.raises(ValueError, match="record template"):
        check_template(bad)


@pytest.mark.parametrize("field,value,match", [
    ("templates", ["{k}=={v}", "{v}:{k}"], "data.recall.templates"),
    ("templates", [], "data.recall.templates"),
    ("eval_template", "{k}={v}", "data.recall.eval_template"),
    ("eval_template", "{k}{s}{v}", "data.recall.eval_template"),
    ("haystack", "lorem", "data.recall.haystack"),
    ("key_lens", [2, 0], "data.recall.key_lens"),
])
def test_bad_recall_fields_fail_at_start_up(field, value, match):
    cfg = RunConfig()
    setattr(cfg.data.recall, field, value)
    with pytest.raises(ConfigError, match=match):
        validate(cfg)


def test_corpus_haystack_needs_a_corpus():
    cfg = RunConfig()
    cfg.data.source, cfg.data.recall.haystack = "recall", "corpus"
    with pytest.raises(ConfigError, match="needs a corpus"):
        validate(cfg)
    with pytest.raises(ValueError, match="needs a haystack"):
        make_recall_doc(HARD, 0, TOK)


def test_default_documents_are_unchanged():
    """A one-template, word-filler config draws exactly what it drew before haystacks existed: every result
    recorded on those documents stays reproducible (digest taken from the code before this change)."""
    cfg = RecallConfig(doc_tokens=128, n_records=1, key_len=2, value_len=3, records_region=0.4)
    cfg4 = dataclasses.replace(cfg, doc_tokens=4096, n_records=4, records_region=0.75)
    h = hashlib.sha256()
    for s in range(200):
        for c in (cfg, cfg4):
            d = make_recall_doc(c, s)
            h.update(d.ids.numpy().tobytes())
            h.update(repr((d.record_spans, d.query_start, d.answer_span)).encode())
        h.update(make_shifted_recall_doc(cfg, s, 128, 32).ids.numpy().tobytes())
    for task in ("passkey", "multi_needle"):
        for s in range(30):
            d = make_long_doc(task, 2048, 0.3, s, key_len=2, value_len=3)
            h.update(d.ids.numpy().tobytes())
            h.update(repr((d.record_spans, d.query_start)).encode())
    assert h.hexdigest() == "3c417d6406eec5a4e3f84871ef45973638acc1d2a1a902ecb166e0dd532704f5"


def test_corpus_recall_documents(haystacks):
    """Filler from real code (capitals, digits, '=' and ':' around the record), every training template and
    both key lengths drawn, the held-out template never, and each document fixed by its seed."""
    docs = [make_recall_doc(HARD, s, TOK, haystacks["train"]) for s in range(60)]
    for d in docs:
        _check_doc(d)
        assert d.template in TEMPLATES
    assert {d.template for d in docs} == set(TEMPLATES)
    assert {len(d.keys[0]) for d in docs} == {2, 3}
    filler = "".join(TOK.decode(d.ids[1:d.record_spans[0][0]]) for d in docs)
    assert any(c.isupper() for c in filler) and any(c.isdigit() for c in filler) and "=" in filler and ":" in filler
    again = make_recall_doc(HARD, 5, TOK, haystacks["train"])
    assert torch.equal(again.ids, docs[5].ids) and again.template == docs[5].template
    held = make_recall_doc(HARD, 5, TOK, haystacks["train"], template=HARD.eval_template)
    _check_doc(held)
    assert held.template == "{k} is {v}"
    shifted = make_shifted_recall_doc(HARD, 3, 128, 32, TOK, haystacks["train"])
    assert shifted.num_tokens == 128
    _check_doc(dataclasses.replace(shifted, ids=shifted.ids[:shifted.answer_span[1]]))


def test_near_decoys_differ_in_one_letter(haystacks):
    cfg = dataclasses.replace(HARD, doc_tokens=512, n_records=4, records_region=0.75)
    answers = set()
    for s in range(20):
        d = make_recall_doc(cfg, s, TOK, haystacks["train"])
        _check_doc(d)
        q = d.keys[d.answer_record]
        answers.add(d.answer_record)
        for i, k in enumerate(d.keys):
            if i != d.answer_record:
                assert len(k) == len(q) and sum(a != b for a, b in zip(k, q)) == 1, (q, k)
    assert len(answers) > 1  # the queried record is not always in one place


@pytest.mark.parametrize("task", ["passkey", "multi_needle"])
def test_long_documents_with_templates_and_corpus(haystacks, task):
    for s, tpl in enumerate(["{k} is {v}", "set {k} to {v}", "{k}={v}"]):
        d = make_long_doc(task, 1024, 0.5, s, key_len=2, value_len=3, template=tpl, haystack=haystacks["val"],
                          near_decoys=True)
        _check_doc(d)
        assert d.template == tpl and d.num_tokens == 1024
        if task == "multi_needle":
            assert all(sum(a != b for a, b in zip(k, d.keys[0])) == 1 for k in d.keys[1:])
    # a non-default template changes the document; the default one keeps the seed's old document
    plain = make_long_doc(task, 1024, 0.5, 1, key_len=2, value_len=3)
    assert plain.template == "{k}={v}" and not torch.equal(
        plain.ids, make_long_doc(task, 1024, 0.5, 1, key_len=2, value_len=3, template="{k}: {v}").ids)


def test_haystacks_read_their_own_split(haystacks):
    """Training filler comes from the train split, evaluation filler from the val split."""
    data = DataConfig(recall=HARD)
    for split in ("train", "val"):
        keys = set(make_source(data, split, max_files=MAX_FILES).docs.keys)
        assert set(haystacks[split].stream.docs.keys) == keys
    assert not set(haystacks["train"].stream.docs.keys) & set(haystacks["val"].stream.docs.keys)


def test_stage2_sampler_cuts_recall_filler_from_its_corpus():
    data = DataConfig(recall=dataclasses.replace(HARD, doc_tokens=256, n_records=4, records_region=0.75))
    corpus = make_source(data, "train", max_files=MAX_FILES)
    sampler = Stage2Sampler(corpus, data.recall, 1.0, "train", TOK)
    batch = sampler.sample(4, 256, torch.Generator().manual_seed(0))
    assert batch.is_recall.all()
    for d in batch.recall_docs:
        _check_doc(d)
    with pytest.raises(ValueError, match="needs a corpus"):
        Stage2Sampler(None, data.recall, 1.0, "train", TOK)


def test_drawn_separators():
    """``{s}`` is drawn per document: symbols or a made-up word, never longer than record_len assumes, never the
    held-out realisation, fixed by the rng's seed; a template without ``{s}`` draws nothing from the rng."""
    import random  # noqa: PLC0415

    rng = random.Random(0)
    seps = [draw_separator(rng) for _ in range(2000)]
    assert max(map(len, seps)) == SEPARATOR_MAX_LEN and min(map(len, seps)) == 1
    assert all("\n" not in x and "{" not in x and not any(c.isupper() or c.isdigit() for c in x) for x in seps)
    words = [x for x in seps if x.strip().isalpha()]
    assert 0.4 < len(words) / len(seps) < 0.6 and len(set(seps)) > 500  # half made-up words, many distinct
    assert all(record_len(x.join(["{k}", "{v}"]), 2, 3) <= record_len("{k}{s}{v}", 2, 3) for x in seps)
    held = ["{k}={v}"]  # a likely draw (~1 in 200), so the exclusion is exercised
    drawn = [realize_template(random.Random(s), "{k}{s}{v}", held) for s in range(3000)]
    assert "{k}={v}" not in drawn and "{k}={v}" in [realize_template(random.Random(s), "{k}{s}{v}") for s in range(3000)]
    assert drawn == [realize_template(random.Random(s), "{k}{s}{v}", held) for s in range(3000)]
    rng_a, rng_b = random.Random(7), random.Random(7)
    assert realize_template(rng_a, "{k}: {v}") == "{k}: {v}" and rng_a.random() == rng_b.random()
    rng_a, rng_b = random.Random(1), random.Random(1)
    assert choose_template(rng_a, ["{k}={v}"]) == "{k}={v}" and rng_a.random() == rng_b.random()  # one template: no draw


def test_documents_with_drawn_separators(haystacks):
    """Recall and long-range documents with ``{k}{s}{v}``: each holds its own realised template (records and query
    agree with it), the held-out template is never drawn, and a seed fixes the separator."""
    cfg = dataclasses.replace(HARD, templates=["{k}={v}", "{k}{s}{v}"], eval_template="{k} ~ {v}")
    docs = [make_recall_doc(cfg, s, TOK, haystacks["train"]) for s in range(80)]
    for d in docs:
        _check_doc(d)
        assert "{s}" not in d.template and d.template != cfg.eval_template
        if d.query_separator is None:  # a fixed template
            assert d.template == "{k}={v}"
        else:  # the span holds the drawn separator, right before the answer
            assert TOK.decode(d.ids[slice(*d.query_separator)]) == d.template[3:-3] and d.query_separator[1] == d.answer_span[0]
    drawn = {d.template for d in docs} - {"{k}={v}"}
    assert len(drawn) > 10  # separators vary from document to document
    assert make_recall_doc(cfg, 11, TOK, haystacks["train"]).template == docs[11].template
    for task in ("passkey", "multi_needle"):
        longs = [make_long_doc(task, 1024, 0.5, s, key_len=2, value_len=3, template="{k}{s}{v}",
                               haystack=haystacks["val"], near_decoys=True, exclude=["{k} ~ {v}"]) for s in range(6)]
        for d in longs:
            _check_doc(d)
            assert d.num_tokens == 1024 and "{s}" not in d.template
            assert TOK.decode(d.ids[slice(*d.query_separator)]) == d.template[3:-3]
        assert len({d.template for d in longs}) > 1
