"""model=hf refuses what its adapter would get wrong, at --dry-run, in one line, with exit 2 and nothing
written: architectures that do something outside their decoder layers (Granite's multipliers, Cohere's
interleaved rotary and logit scale; found by comparing logits with the model's own forward) and rotary
variants the working context's positions do not reproduce (llama3 scaling, partial rotary). The
parity check runs at construction too (load_hf_base), on the real weights. See obsidian Base models."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers", reason="model=hf needs the hf extra (scripts/setup_env.sh installs it)")

from mc.app import workflow  # noqa: E402
from mc.config import ModelConfig  # noqa: E402
from mc.nets.hf_base import HFBaseError  # noqa: E402
from mc.nets.hf_load import load_hf_base, preflight_hf_base  # noqa: E402
from _hf_models import other_family_dir, tiny_hf_dir  # noqa: E402

REFUSED = {"granite": ("GraniteForCausalLM", "differ from the model's own forward"),
           "cohere": ("CohereForCausalLM", "differ from the model's own forward"),
           "llama3": ("LlamaForCausalLM", "rope_type='llama3'"),
           "partial": ("StableLm", "")}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("hf_other")


@pytest.mark.parametrize("family", sorted(REFUSED))
def test_dry_run_refuses_in_one_line_and_writes_nothing(root, family, tmp_path, capsys):
    d = other_family_dir(root, family)
    out_dir = tmp_path / "runs"
    rc = workflow.main(["--preset", "smoke", "model=hf", f"model.hf_path={d}", f"out_dir={out_dir}", "--dry-run"])
    err = capsys.readouterr().err
    assert rc == workflow.EXIT_CONFIG, err
    lines = [ln for ln in err.splitlines() if ln.startswith("run10: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    arch, why = REFUSED[family]
    assert arch in lines[0] and why in lines[0], lines[0]
    assert not out_dir.exists()  # nothing written
    # A real run stops at the same place, before writing anything either.
    assert workflow.main(["--preset", "smoke", "model=hf", f"model.hf_path={d}", f"out_dir={out_dir}"]) == 2
    assert not out_dir.exists()


def test_granite_refused_at_load_on_its_weights(root):
    with pytest.raises(HFBaseError, match=r"GraniteForCausalLM: the adapter's logits differ .*relative max difference"):
        load_hf_base(ModelConfig(source="hf", hf_path=str(other_family_dir(root, "granite"))), torch.device("cpu"))


@pytest.mark.parametrize("family", ["llama", "qwen2", "mistral"])
def test_supported_families_pass_the_preflight(root, family):
    m = ModelConfig(source="hf", hf_path=str(tiny_hf_dir(root, family, 0.25)))
    state = torch.random.get_rng_state()
    assert preflight_hf_base(m).endswith("ForCausalLM")
    assert torch.equal(state, torch.random.get_rng_state())  # checking a config does not move the run's random stream


def test_non_finite_hf_weights_are_refused_at_load(root, tmp_path):
    from transformers import AutoModelForCausalLM

    from mc.train.checkpoint import CheckpointError

    src = tiny_hf_dir(root, "llama", 0.25)
    model = AutoModelForCausalLM.from_pretrained(str(src))
    with torch.no_grad():
        model.model.layers[1].mlp.up_proj.weight[0, 0] = float("nan")
    bad = tmp_path / "nan_llama"
    model.save_pretrained(bad)
    for f in src.glob("tokenizer*"):
        (bad / f.name).write_bytes(f.read_bytes())
    with pytest.raises(CheckpointError, match=r"nan_llama holds non-finite weights: .*layers\.1\.mlp\.up_proj\.weight"):
        load_hf_base(ModelConfig(source="hf", hf_path=str(bad)), torch.device("cpu"))
