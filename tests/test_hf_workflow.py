"""model=hf through the whole workflow (stage 1 skipped, stage 2, eval, report) on a tiny model from
scripts/make_tiny_hf.py, with its own tokenizer feeding the corpus and the generated tasks.
See obsidian Base models."""
from __future__ import annotations

import json
import math

import pytest
import torch

pytest.importorskip("transformers", reason="model=hf needs the hf extra (scripts/setup_env.sh installs it)")

from mc.app import workflow  # noqa: E402
from mc.config import DataConfig, ModelConfig, RecallConfig  # noqa: E402
from mc.data.hf_tokenizer import tokenizer_for  # noqa: E402
from mc.data.loader import make_source  # noqa: E402
from mc.data.long_tasks import make_long_doc  # noqa: E402
from mc.data.recall import make_recall_doc  # noqa: E402
from _hf_models import tiny_hf_dir  # noqa: E402


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
    return tiny_hf_dir(tmp_path_factory.mktemp("hf"), "qwen2")


def test_generated_tasks_and_corpus_use_the_model_tokenizer(qwen_dir):
    tok = tokenizer_for(ModelConfig(source="hf", hf_path=str(qwen_dir)))
    assert 384 <= tok.vocab_size <= 448 and not tok.byte_level  # 384 BPE entries (+ Qwen2's own special)
    doc = make_recall_doc(RecallConfig(doc_tokens=200, n_records=2, key_len=2, value_len=3), 5, tok)
    assert doc.ids.shape == (200,) and int(doc.ids[0]) == tok.bos_id
    a0, a1 = doc.answer_span
    assert tok.decode(doc.ids[a0:a1]) == doc.answer  # the answer tokens are the value, one per digit
    r0, r1 = doc.queried_span
    assert tok.decode(doc.ids[r0:r1]) == f"{doc.keys[doc.answer_record]}={doc.answer}"
    assert int(doc.ids.max()) >= 259  # BPE merges in the filler: not the byte vocabulary
    pk = make_long_doc("passkey", 300, 0.5, 1, key_len=2, value_len=3, tokenizer=tok)
    assert pk.ids.shape == (300,) and tok.decode(pk.ids[pk.answer_span[0]:pk.answer_span[1]]) == pk.answer
    src = make_source(DataConfig(source="stdlib"), "train", max_files=30, tokenizer=tok)
    rows = src.sample_batch(2, 64, torch.Generator().manual_seed(0))
    assert rows.shape == (2, 64) and int(rows.max()) < tok.vocab_size
    assert len(tok.decode(rows[0])) > 64  # several characters per token: the text went through the BPE


def test_run10_smoke_with_model_hf_end_to_end(qwen_dir, tmp_path, capsys):
    args = ["--preset", "smoke", "model=hf", f"model.hf_path={qwen_dir}", f"out_dir={tmp_path}", "--name", "hf",
            "train.stage2.steps=6", "train.stage2.eval_every=3", "train.stage2.ckpt_every=3",
            "eval.n_docs=2", "eval.long_range.multiples=[]", "data.recall_mix=0.5"]
    assert workflow.main(args) == 0, capsys.readouterr().err[-3000:]
    out = capsys.readouterr().out
    assert "stage1 skipped" in out and "stage1=" not in out
    run = tmp_path / "hf"
    assert not (run / "stage1").exists() and (run / "report.md").is_file()
    assert json.loads((run / "config.json").read_text())["model"]["d_model"] == 64  # from the model's config.json
    ev = json.loads((run / "eval" / "eval.json").read_text())
    losses = [v for d in ev["per_doc"] for v in d["values"].get("corpus_tail_loss", {}).values()]
    assert losses and all(math.isfinite(x) for x in losses)
    assert math.log(448) - 1.0 < sum(losses) / len(losses) < math.log(448) + 1.0  # a random 448-row model
    # Another base in the same folder: refused, unless stage 2 is redone (--force=stage1 means that with model=hf).
    other = tiny_hf_dir(tmp_path, "llama")
    moved = [a.replace(str(qwen_dir), str(other)) for a in args] + ["--dry-run"]
    assert workflow.main(moved) == workflow.EXIT_CONFIG
    assert "model.hf_path" in capsys.readouterr().err
    for force in ("--force=stage1", "--force=stage2"):
        assert workflow.main([*moved, force]) == 0
        assert "stage2=run" in capsys.readouterr().out
