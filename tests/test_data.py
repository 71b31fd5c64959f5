"""Tests for mc/data: tokenizer, stdlib corpus + split + fingerprint, recall task, local files, loader."""
from __future__ import annotations

import dataclasses
import json
import sys

import pytest
import torch

from mc.config import BOS_ID, EOS_ID, PAD_ID, DataConfig, RecallConfig
from mc.data import (ByteTokenizer, DocumentSet, TokenStream, corpus_fingerprint, decode, encode, exact_recall,
                     load_documents, load_texts, make_recall_doc, make_source, make_stage2_sampler,
                     recall_batch, span_blocks, split_files, stdlib_files, stdlib_root)
from mc.data.recall import check_recall_config

SMALL = RecallConfig(doc_tokens=512, n_records=6, key_len=4, value_len=4, records_region=0.25)


# ----------------------------------------------------------------------------- tokenizer

def test_tokenizer_round_trip_and_specials():
    tok = ByteTokenizer()
    text = "def f(x):\n    return 'héllo ✓'\n"
    ids = tok.encode(text, bos=True, eos=True)
    assert ids[0] == BOS_ID and ids[-1] == EOS_ID
    assert all(0 <= i < 256 for i in ids[1:-1])
    assert tok.decode(ids) == text
    assert decode(encode(text, bos=False)) == text
    assert tok.decode([BOS_ID, 104, 105, PAD_ID, EOS_ID]) == "hi"
    assert tok.decode(tok.encode_tensor(text)) == text
    assert tok.decode([0xFF, 104]) == "\ufffdh"  # invalid utf-8 is replaced, not an error
    with pytest.raises(ValueError, match="outside the byte vocabulary"):
        tok.decode([999])


# ----------------------------------------------------------------------------- stdlib corpus

@pytest.fixture(scope="module")
def std_paths():
    return stdlib_files()


def test_stdlib_files_found_sorted_and_clean(std_paths):
    root = stdlib_root()
    rels = [p.relative_to(root).as_posix() for p in std_paths]
    assert len(rels) > 100 and rels == sorted(rels)
    assert "os.py" in rels and "json/__init__.py" in rels
    assert not any("site-packages" in r or "/test/" in f"/{r}" or "__pycache__" in r for r in rels)
    assert sum(p.stat().st_size for p in std_paths[:20]) > 0
    assert stdlib_files(max_files=5) == std_paths[:5]


def test_stdlib_split_stable_disjoint_complete(std_paths):
    train1, val1 = split_files(std_paths, 0.05)
    train2, val2 = split_files(list(reversed(std_paths)), 0.05)
    assert set(train1) == set(train2) and set(val1) == set(val2)
    assert not set(train1) & set(val1)
    assert set(train1) | set(val1) == set(std_paths)
    assert 0 < len(val1) < 0.15 * len(std_paths)
    # the split of a file does not depend on which other files are present
    _, val_sub = split_files(std_paths[::3], 0.05)
    assert set(val_sub) == set(val1) & set(std_paths[::3])


def test_stdlib_fingerprint_stable(std_paths):
    fp1 = corpus_fingerprint(std_paths[:40])
    fp2 = corpus_fingerprint(list(reversed(std_paths[:40])))
    assert fp1 == fp2
    assert fp1["file_count"] == 40 and fp1["bytes"] == sum(p.stat().st_size for p in std_paths[:40])
    assert len(fp1["sha256"]) == 64
    assert corpus_fingerprint(std_paths[:39])["sha256"] != fp1["sha256"]


def test_stdlib_missing_root_is_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        stdlib_files(tmp_path / "nope")
    with pytest.raises(ValueError, match="no .py files"):
        stdlib_files(tmp_path)


# ----------------------------------------------------------------------------- recall task

def test_recall_same_seed_same_doc_different_seed_differs():
    a, b, c = make_recall_doc(SMALL, 7), make_recall_doc(SMALL, 7), make_recall_doc(SMALL, 8)
    assert torch.equal(a.ids, b.ids) and a.record_spans == b.record_spans and a.answer_record == b.answer_record
    assert not torch.equal(a.ids, c.ids)


@pytest.mark.parametrize("seed", range(6))
def test_recall_structure(seed):
    cfg = SMALL
    d = make_recall_doc(cfg, seed)
    assert d.ids.dtype == torch.long and d.ids.shape == (cfg.doc_tokens,) and d.ids[0] == BOS_ID
    assert len(set(d.keys)) == cfg.n_records
    region = int(cfg.doc_tokens * cfg.records_region)
    text = decode(d.ids)
    for i, (s, e) in enumerate(d.record_spans):
        assert decode(d.ids[s:e]) == f"{d.keys[i]}={d.values[i]}"
        assert 1 <= s < e <= region
        vs, ve = d.value_span(i)
        assert decode(d.ids[vs:ve]) == d.values[i]
        assert text.count(d.keys[i]) == (2 if i == d.answer_record else 1)  # keys never occur in filler
    assert d.answer_span == (cfg.doc_tokens - cfg.value_len, cfg.doc_tokens)
    assert decode(d.answer_ids()) == d.answer == d.values[d.answer_record]
    assert decode(d.ids[d.query_start:d.answer_span[0]]) == f"{d.keys[d.answer_record]}="
    assert text.count(d.answer) == 2  # the record and the answer; filler holds no digits
    blocks = span_blocks(d.queried_span, 32)
    assert d.queried_span[0] // 32 == blocks[0] and (d.queried_span[1] - 1) // 32 == blocks[-1]


def test_recall_batch_and_exact_recall():
    rb = recall_batch(SMALL, [1, 2, 3])
    assert rb.ids.shape == (3, SMALL.doc_tokens)
    for r, d in enumerate(rb.docs):
        assert (rb.record_start[r].item(), rb.record_end[r].item()) == d.queried_span
        assert rb.answer_end[r].item() == SMALL.doc_tokens
    answers = torch.stack([d.answer_ids() for d in rb.docs])
    pred = answers.clone()
    pred[1, 0] += 1
    assert exact_recall(pred, answers).tolist() == [True, False, True]


def test_recall_config_errors_are_clear():
    with pytest.raises(ValueError, match="records need"):
        check_recall_config(dataclasses.replace(SMALL, doc_tokens=64, n_records=8))
    with pytest.raises(ValueError, match="unique keys"):
        check_recall_config(dataclasses.replace(SMALL, key_len=1, n_records=30, doc_tokens=4096))


# ----------------------------------------------------------------------------- local files

def test_local_txt_and_jsonl(tmp_path):
    (tmp_path / "a.txt").write_text("hello world")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.jsonl").write_text('{"text": "one"}\n\n{"text": "two", "id": 3}\n')
    docs = load_documents(str(tmp_path / "**" / "*.*"))
    assert [d.text for d in docs] == ["hello world", "one", "two"]
    assert [d.key for d in docs] == ["a.txt", "sub/b.jsonl#1", "sub/b.jsonl#3"]
    assert load_texts(str(tmp_path / "a.txt")) == ["hello world"]
    assert load_texts(str(tmp_path)) == ["hello world", "one", "two"]  # a folder = all supported files


def test_local_jsonl_errors_name_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"body": "x"}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: no 'text' field"):
        load_texts(str(bad))
    bad.write_text('{"text": "ok"}\n{not json\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: invalid JSON"):
        load_texts(str(bad))


def test_local_missing_and_empty_are_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="matched no files"):
        load_texts(str(tmp_path / "*.txt"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_texts(str(tmp_path / "missing.txt"))
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(ValueError, match="hold no text"):
        load_texts(str(tmp_path / "*.txt"))
    (tmp_path / "notes.csv").write_text("a,b")
    with pytest.raises(ValueError, match="unsupported"):
        load_texts(str(tmp_path / "*"))


def test_parquet_with_pyarrow(tmp_path):
    pa = pytest.importorskip("pyarrow", reason="pyarrow not installed; the missing-pyarrow error is tested separately")
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"text": ["x", "", "yz"]}), tmp_path / "d.parquet")
    assert load_texts(str(tmp_path / "*.parquet")) == ["x", "yz"]
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "d.parquet")
    with pytest.raises(ValueError, match="no 'text' column"):
        load_texts(str(tmp_path / "d.parquet"))


def test_parquet_without_pyarrow_says_pip_install(tmp_path, monkeypatch):
    (tmp_path / "d.parquet").write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # makes `import pyarrow...` raise ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(ImportError, match="pip install pyarrow"):
        load_texts(str(tmp_path / "d.parquet"))


# ----------------------------------------------------------------------------- loader

def test_token_stream_concatenates_with_separators():
    docs = DocumentSet.from_texts(["a", "b"], ["xy", "z"], name="t")
    stream = TokenStream(docs)
    assert stream.total == 7
    w = stream.window(0, 9)  # wraps around the 7-token stream
    assert w.tolist() == [BOS_ID, ord("x"), ord("y"), EOS_ID, BOS_ID, ord("z"), EOS_ID, BOS_ID, ord("x")]
    b = stream.sample_batch(3, 5, torch.Generator().manual_seed(0))
    assert b.shape == (3, 5) and b.dtype == torch.long


def test_stdlib_source_determinism_and_shapes():
    cfg = DataConfig(source="stdlib", val_fraction=0.2)
    src = make_source(cfg, "train", max_files=40)
    a = src.sample_batch(4, 256, torch.Generator().manual_seed(3))
    b = src.sample_batch(4, 256, torch.Generator().manual_seed(3))
    c = src.sample_batch(4, 256, torch.Generator().manual_seed(4))
    assert a.shape == (4, 256) and a.dtype == torch.long
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert int(a.min()) >= 0 and int(a.max()) <= EOS_ID
    val = make_source(cfg, "val", max_files=40)
    assert not set(val.docs.keys) & set(src.docs.keys)
    assert len(val.docs) + len(src.docs) == 40
    fp = src.fingerprint()
    assert fp["file_count"] == 40 and fp == make_source(cfg, "train", max_files=40).fingerprint()


def test_files_source_split(tmp_path):
    lines = "\n".join(json.dumps({"text": f"document number {i} " * 5}) for i in range(60))
    (tmp_path / "d.jsonl").write_text(lines)
    cfg = DataConfig(source="files", files_glob=str(tmp_path / "*.jsonl"), val_fraction=0.2)
    tr, va = make_source(cfg, "train"), make_source(cfg, "val")
    assert len(tr.docs) + len(va.docs) == 60 and len(va.docs) > 0
    assert tr.sample_batch(2, 64, torch.Generator().manual_seed(0)).shape == (2, 64)


def test_recall_source_and_stage2_sampler():
    cfg = DataConfig(source="stdlib", recall_mix=0.5, val_fraction=0.2,
                     recall=RecallConfig(doc_tokens=512, n_records=4))
    sampler = make_stage2_sampler(cfg, "train", max_files=40)
    b1 = sampler.sample(4, 512, torch.Generator().manual_seed(1))
    b2 = sampler.sample(4, 512, torch.Generator().manual_seed(1))
    assert torch.equal(b1.tokens, b2.tokens) and b1.tokens.shape == (4, 512)
    assert b1.is_recall.tolist() == [True, True, False, False]
    for r in range(4):
        if b1.is_recall[r]:
            d = b1.recall_docs[r]
            assert torch.equal(b1.tokens[r], d.ids)
            s, e = b1.answer_start[r].item(), b1.answer_end[r].item()
            assert decode(b1.tokens[r, s:e]) == d.answer and b1.query_ends()[r] == s  # the index's query stops there
            rs, re_ = b1.record_start[r].item(), b1.record_end[r].item()
            assert decode(b1.tokens[r, rs:re_]) == f"{d.keys[d.answer_record]}={d.answer}"
            others = b1.other_record_spans()[r]  # the decoys: every record but the queried one
            assert len(others) == len(d.record_spans) - 1 and (rs, re_) not in others
            assert [decode(b1.tokens[r, a:b]) for a, b in others] == [
                f"{k}={v}" for i, (k, v) in enumerate(zip(d.keys, d.values)) if i != d.answer_record]
        else:
            assert b1.recall_docs[r] is None and b1.answer_start[r].item() == -1
            assert b1.other_record_spans()[r] == () and b1.query_ends()[r] is None
    # the train and val recall documents come from disjoint seed namespaces
    tr = make_source(dataclasses.replace(cfg, source="recall"), "train")
    va = make_source(dataclasses.replace(cfg, source="recall"), "val")
    assert not torch.equal(tr.doc(0).ids, va.doc(0).ids) and torch.equal(va.doc(0).ids, va.doc(0).ids)
    assert tr.sample_batch(2, 512, torch.Generator().manual_seed(0)).shape == (2, 512)


def test_shifted_recall_rows_put_the_query_at_varied_positions():
    """Stage 1's shifted rows (recall.stage1_min_tokens): a document of a seeded length L in
    [min, T], its query and answer ending at L, then filler; spans point at the right tokens."""
    cfg = dataclasses.replace(SMALL, n_records=2, doc_tokens=256)
    rb = recall_batch(cfg, list(range(24)), min_tokens=96)
    assert rb.ids.shape == (24, 256)
    ends = set()
    for r, d in enumerate(rb.docs):
        end = rb.answer_end[r].item()
        ends.add(end)
        assert 96 <= end <= 256 and rb.ids[r, 0] == BOS_ID and torch.equal(rb.ids[r], d.ids)
        assert decode(rb.ids[r, rb.answer_start[r]:end]) == d.answer
        assert decode(rb.ids[r, d.query_start:rb.answer_start[r]]) == f"{d.keys[d.answer_record]}="
        assert decode(rb.ids[r, rb.record_start[r]:rb.record_end[r]]) == f"{d.keys[d.answer_record]}={d.answer}"
        assert decode(rb.ids[r]).count(d.answer) == 2  # the filler after the answer holds no digits
    assert len(ends) >= 12, "the query end varies from row to row"
    again = recall_batch(cfg, list(range(24)), min_tokens=96)
    assert torch.equal(rb.ids, again.ids)  # seeded


def test_stage1_sampler_alone_shifts_recall_rows_and_bad_minimum_is_refused():
    from mc.config import ConfigError
    from mc.config_loading import load_config
    from mc.train.common import make_sampler
    cfg = load_config(["preset=smoke", "train.device=cpu", "data.recall.stage1_min_tokens=40"])
    t = cfg.model.max_seq_len
    g = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    s1 = make_sampler(cfg, "train", t, max_files=10, stage1=True).sample(16, t, g())
    s2 = make_sampler(cfg, "train", t, max_files=10).sample(16, t, g())
    ends1 = {int(e) for e, r in zip(s1.answer_end, s1.is_recall) if r}
    ends2 = {int(e) for e, r in zip(s2.answer_end, s2.is_recall) if r}
    assert ends2 == {t} and len(ends1) > 1
    with pytest.raises(ConfigError, match="stage1_min_tokens"):
        load_config(["preset=smoke", f"data.recall.stage1_min_tokens={t + 1}"])
    with pytest.raises(ConfigError, match="stage1_min_tokens.*cannot hold"):
        load_config(["preset=smoke", "data.recall.stage1_min_tokens=4"])


def _stage_batches(overrides: list[str], batch: int) -> tuple[int, object, object]:
    """History length, then a stage-1 and a stage-2 recall batch of the smoke preset with ``overrides``."""
    from mc.config_loading import load_config
    from mc.train.common import make_sampler
    cfg = load_config(["preset=smoke", "train.device=cpu", "data.source=recall", *overrides])
    t = cfg.mc.history_tokens
    s1 = make_sampler(cfg, "train", t, stage1=True).sample(batch, t, torch.Generator().manual_seed(0))
    return t, s1, make_sampler(cfg, "train", t).sample(batch, t, torch.Generator().manual_seed(0))


@pytest.mark.parametrize("key, bad", [("stage2_records_region", 1.5), ("stage2_n_records", -1)])
def test_stage2_only_recall_fields_are_validated(key, bad):
    from mc.config import ConfigError
    from mc.config_loading import load_config
    with pytest.raises(ConfigError, match=key):
        load_config(["preset=smoke", f"data.recall.{key}={bad}"])


def test_stage2_records_region_moves_stage2_records_only():
    t, s1, s2 = _stage_batches(["data.recall.records_region=0.2", "data.recall.stage2_records_region=0.9"], 32)
    assert int(s1.record_end.max()) <= int(0.2 * t)
    assert int(s2.record_start.max()) > int(0.2 * t)  # some stage-2 records sit past the stage-1 region


def test_stage2_n_records_puts_several_records_in_stage2_documents_only():
    _, s1, s2 = _stage_batches(["data.recall.n_records=1", "data.recall.stage2_n_records=3"], 8)
    assert {len(d.keys) for d in s2.recall_docs} == {3}  # one of them queried
    assert {len(d.keys) for d in s1.recall_docs} == {1}


def test_short_shifted_documents_hold_fewer_records():
    cfg = dataclasses.replace(SMALL, n_records=6, doc_tokens=512, records_region=0.5)
    rb = recall_batch(cfg, list(range(40)), min_tokens=40)
    counts = {len(d.keys) for d in rb.docs}
    assert 1 in counts or 2 in counts, counts  # the shortest rows cannot hold six records
    assert max(counts) == 6
    for r, d in enumerate(rb.docs):
        assert decode(rb.ids[r, rb.answer_start[r]:rb.answer_end[r]]) == d.answer
