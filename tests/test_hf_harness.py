"""Compile on model=hf: the compile harness passes (a tiny Llama from scripts/make_tiny_hf.py, CPU),
and the adapter itself compiles with fullgraph=True and matches eager.

The model is 1 layer of width 32 with 2 heads, the TINY config's base shape, so GistNet and LensNet
compile to the same graphs as tests/test_harness.py's run and the shared run-local Inductor cache
(.cache/inductor) makes this run warm when that one ran first. See obsidian Base models.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="model=hf needs the hf extra (scripts/setup_env.sh installs it)")

from _subproc import run_script  # noqa: E402
from _tiny_config import TINY  # noqa: E402
from _hf_models import tiny_hf_dir  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_harness_passes_on_model_hf(tmp_path):
    d = tiny_hf_dir(tmp_path, "llama", hidden=32, layers=1, heads=2, kv_heads=1)
    out = tmp_path / "v.json"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(ROOT / ".cache" / "inductor"))
    env.pop("MC_HARNESS_INJECT", None)
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "mc_compile_harness.py"), "--json", str(out), *TINY,
                           "model=hf", f"model.hf_path={d}"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    v = json.loads(out.read_text())
    assert v["passed"] is True and v["recompiles_after_warmup"] == 0 and v["graph_breaks"] == 0
    assert v["info"]["config"]["model"]["source"] == "hf" and v["info"]["config"]["model"]["d_model"] == 32
    assert "VERDICT: PASS" in proc.stdout


@pytest.mark.slow
def test_adapter_compiles_fullgraph_and_matches_eager(tmp_path):
    d = tiny_hf_dir(tmp_path, "qwen2", 0.25, hidden=32, layers=1, heads=2, kv_heads=1)
    res = run_script(f"""
        import json, torch
        from mc.config import ModelConfig
        from mc.nets.hf_load import load_hf_base
        from mc.nets.positional import lod_rotary_cos_sin
        m = ModelConfig(source="hf", hf_path={str(d)!r})
        base = load_hf_base(m, torch.device("cpu"))
        def f(emb, cos, sin, mask):
            return base(embeds=emb, cos=cos, sin=sin, key_padding_mask=mask)
        g = torch.Generator().manual_seed(0)
        emb = torch.randn(2, 16, 32, generator=g)
        lods = torch.zeros(2, 16, dtype=torch.long)
        lods[:, :4] = 1  # gists first, as in a working context
        cos, sin = lod_rotary_cos_sin(torch.arange(16.0)[None].expand(2, -1), lods, 4, base.head_dim, m.rope_base)
        mask = torch.ones(2, 16, dtype=torch.bool)
        mask[1, 10:] = False
        got = torch.compile(f, fullgraph=True)(emb, cos, sin, mask)
        want = f(emb, cos, sin, mask)
        print("RESULT_JSON:" + json.dumps({{"diff": (got - want).abs().max().item()}}))
    """, timeout=600)
    assert res["diff"] <= 1e-5
