"""model=hf: the adapter reproduces the HF model's own forward (parity), masks padding, follows
LOD-aware positions, and refuses bad directories with one-line errors. See obsidian Base models."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers", reason="model=hf needs the hf extra (scripts/setup_env.sh installs it)")

from transformers import AutoModelForCausalLM  # noqa: E402

from mc.config import ModelConfig, RunConfig  # noqa: E402
from mc.config_checks import validate  # noqa: E402
from mc.nets.hf_base import HFBaseError  # noqa: E402
from mc.nets.hf_load import load_hf_base, sync_model_config  # noqa: E402
from mc.nets.positional import lod_rotary_cos_sin  # noqa: E402
from _hf_models import gpt2_dir, tiny_hf_dir  # noqa: E402

CPU = torch.device("cpu")
# A larger init than HF's 0.02 makes attention scores, hence positions, matter in a random model,
# so a mis-rotated adapter could not pass parity by accident (checked by the shifted-position control).
INIT_STD = 0.25


@pytest.fixture(scope="module")
def hf_root(tmp_path_factory):
    return tmp_path_factory.mktemp("hf")


def _pair(root, family):
    d = tiny_hf_dir(root, family, INIT_STD)
    m = ModelConfig(source="hf", hf_path=str(d))
    return load_hf_base(m, CPU), AutoModelForCausalLM.from_pretrained(str(d)).eval(), m


@pytest.mark.parametrize("family", ["llama", "qwen2", "mistral"])
def test_parity_all_lod0_working_context(hf_root, family):
    base, ref, m = _pair(hf_root, family)
    assert (m.d_model, m.n_layers, m.vocab_size) == (64, 2, ref.config.vocab_size)
    g = torch.Generator().manual_seed(0)
    ids_bt = torch.randint(3, m.vocab_size, (2, 48), generator=g)
    pos_bt = torch.arange(48, dtype=torch.float32)[None].expand(2, -1)
    lods_bt = torch.zeros(2, 48, dtype=torch.long)
    with torch.no_grad():
        want = ref(ids_bt).logits  # [B, T, V]
        cos, sin = lod_rotary_cos_sin(pos_bt, lods_bt, 8, base.head_dim, m.rope_base)
        got = base(embeds=base.embed(ids_bt), cos=cos, sin=sin, key_padding_mask=torch.ones(2, 48, dtype=torch.bool))
        plain = base(ids_bt)  # the token-ids path (plain positions 0..T-1)
        cos1, sin1 = lod_rotary_cos_sin(pos_bt * 2, lods_bt, 8, base.head_dim, m.rope_base)
        shifted = base(embeds=base.embed(ids_bt), cos=cos1, sin=sin1)
    assert got.dtype == torch.float32 and got.shape == want.shape
    assert (got - want).abs().max().item() <= 1e-4
    at = torch.tensor([[0, 17, 47], [5, 6, 30]])  # the LM head at these positions only (training's tail)
    with torch.no_grad():
        part = base(embeds=base.embed(ids_bt), cos=cos, sin=sin, logit_index=at)
    assert part.dtype == torch.float32 and part.shape == (2, 3, m.vocab_size)
    assert (part - want.gather(1, at[..., None].expand(-1, -1, m.vocab_size))).abs().max().item() <= 1e-4
    assert (plain - want).abs().max().item() <= 1e-4
    # Control: relative positions matter in this model (rotary is shift-invariant, so stretch them),
    # so the parity above is about the rotary table, not luck.
    assert (shifted - want).abs().max().item() > 1e-2


def test_key_padding_and_lod_gists(hf_root):
    base, ref, m = _pair(hf_root, "llama")
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, m.vocab_size, (1, 20), generator=g)
    emb = base.embed(ids)
    # Row 0: 20 real tokens then 12 padding entries holding garbage; must equal the unpadded forward.
    padded = torch.cat([emb, torch.randn(1, 12, m.d_model, generator=g)], dim=1)
    mask = torch.arange(32)[None] < 20
    pos = torch.arange(32, dtype=torch.float32)[None]
    cos, sin = lod_rotary_cos_sin(pos, torch.zeros(1, 32, dtype=torch.long), 8, base.head_dim, m.rope_base)
    with torch.no_grad():
        got = base(embeds=padded, cos=cos, sin=sin, key_padding_mask=mask)[:, :20]
        want = ref(ids).logits
        assert (got - want).abs().max().item() <= 1e-4
        assert torch.isfinite(base(embeds=padded, cos=cos, sin=sin, key_padding_mask=mask)).all()
        # An LOD1 entry's damped rotary changes what follows it (the LOD reaches the layers).
        lods = torch.zeros(1, 32, dtype=torch.long)
        lods[0, 0] = 1
        cos_l, sin_l = lod_rotary_cos_sin(pos, lods, 8, base.head_dim, m.rope_base)
        gist = base(embeds=padded, cos=cos_l, sin=sin_l, key_padding_mask=mask)[:, :20]
    assert (gist - got).abs().max().item() > 1e-4


def test_frozen_and_sizes_follow_the_base(hf_root):
    from mc.build import build_nets

    d = tiny_hf_dir(hf_root, "qwen2", INIT_STD)
    cfg = RunConfig()
    cfg.model.source, cfg.model.hf_path = "hf", str(d)
    base, gistnet, lensnet = build_nets(validate(cfg), CPU)
    assert not any(p.requires_grad for p in base.parameters()) and not base.training
    assert cfg.model.d_model == 64 and cfg.model.n_heads == 4
    assert gistnet(torch.randn(3, cfg.mc.block_size, 64)).shape[-1] == 64


def _one_line(exc_info, *words):
    msg = str(exc_info.value)
    assert "\n" not in msg, msg
    for w in words:
        assert w in msg, msg


def test_errors_are_one_line(hf_root, tmp_path):
    with pytest.raises(HFBaseError) as e:
        sync_model_config(ModelConfig(source="hf", hf_path=str(tmp_path / "nowhere")))
    _one_line(e, "does not exist", "nowhere")
    with pytest.raises(HFBaseError) as e:
        sync_model_config(ModelConfig(source="hf", hf_path=str(tmp_path)))
    _one_line(e, "holds no model", str(tmp_path))
    with pytest.raises(HFBaseError) as e:
        sync_model_config(ModelConfig(source="hf", hf_path=str(gpt2_dir(hf_root))))
    _one_line(e, "rotary")
    no_weights = tmp_path / "config_only"
    no_weights.mkdir()
    (no_weights / "config.json").write_text((tiny_hf_dir(hf_root, "llama", INIT_STD) / "config.json").read_text())
    with pytest.raises(HFBaseError) as e:
        load_hf_base(ModelConfig(source="hf", hf_path=str(no_weights)), CPU)
    _one_line(e, "could not be loaded as a causal LM", "config_only")
    cfg = RunConfig()
    cfg.model.hf_path = str(tmp_path)
    with pytest.raises(ValueError) as e:
        validate(cfg)
    _one_line(e, "model.hf_path", "model=hf")
    cfg = RunConfig()
    cfg.model.source, cfg.model.hf_path, cfg.model.hf_dtype = "hf", str(tiny_hf_dir(hf_root, "llama", INIT_STD)), "int8"
    with pytest.raises(ValueError) as e:
        validate(cfg)
    _one_line(e, "model.hf_dtype", "bfloat16")


def test_bfloat16_weights_keep_the_float32_interface(hf_root):
    d = tiny_hf_dir(hf_root, "llama", INIT_STD)
    m = ModelConfig(source="hf", hf_path=str(d), hf_dtype="bfloat16")
    base = load_hf_base(m, CPU)
    ids = torch.randint(3, m.vocab_size, (1, 24), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        emb, logits = base.embed(ids), base(embeds=base.embed(ids), key_padding_mask=torch.ones(1, 24, dtype=torch.bool))
        ref = AutoModelForCausalLM.from_pretrained(str(d)).eval()(ids).logits
    assert base.dtype == torch.bfloat16 and emb.dtype == torch.float32 and logits.dtype == torch.float32
    assert (logits - ref).abs().max().item() < 0.1 * ref.abs().max().item()  # bf16 rounding, same model
