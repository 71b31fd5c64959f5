"""model=hf cached forward: on a GPU its attention runs without cuDNN's per-shape plans, elsewhere unchanged.

The fifth GPU run found the bfloat16 SmolLM2 decoding slower with the KV cache than without it (16 against 40
tok/s on an H200); :func:`mc.nets.hf_cached.attention_without_plans` keeps cuDNN's attention out of the eager cached
forward on CUDA. See obsidian Inference, "Decode on a GPU".
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("transformers", reason="model=hf needs the hf extra (scripts/setup_env.sh installs it)")

from mc.config import ModelConfig  # noqa: E402
from mc.kv_cache import KVCache  # noqa: E402
from mc.nets import hf_cached  # noqa: E402
from mc.nets.hf_load import load_hf_base  # noqa: E402
from mc.nets.positional import rotary_cos_sin, rotary_full  # noqa: E402
from _hf_models import tiny_hf_dir  # noqa: E402

SDP = torch.backends.cuda


def _flags() -> tuple[bool, bool, bool, bool]:
    return SDP.cudnn_sdp_enabled(), SDP.flash_sdp_enabled(), SDP.mem_efficient_sdp_enabled(), SDP.math_sdp_enabled()


def test_cuda_leaves_only_cudnn_out_and_restores_the_flags_cpu_changes_nothing():
    before = _flags()
    with hf_cached.attention_without_plans(torch.device("cuda")):
        assert _flags() == (False, before[1], before[2], before[3])
    assert _flags() == before
    with hf_cached.attention_without_plans(torch.device("cpu")):
        assert _flags() == before


def _decode(base, n_prompt: int, n_new: int, device) -> list[torch.Tensor]:
    """Logits of a prompt pass and ``n_new`` one-entry steps through the cached forward (greedy)."""
    cap = n_prompt + n_new
    cache = KVCache(base.cfg.n_layers, base.kv_heads, base.head_dim, cap, device=device, dtype=base.dtype)
    cos, sin = rotary_full(*rotary_cos_sin(torch.arange(cap, device=device), base.head_dim, base.cfg.rope_base))
    slots = torch.arange(cap, device=device)
    ids = torch.randint(3, base.cfg.vocab_size, (1, n_prompt), generator=torch.Generator().manual_seed(0)).to(device)
    out = [base.forward_cached(base.embed(ids), cos[:n_prompt], sin[:n_prompt], cache.k, cache.v, slots[:n_prompt],
                               n_prompt)[0]]
    for p in range(n_prompt, cap):
        tok = out[-1].argmax().view(1, 1)
        out.append(base.forward_cached(base.embed(tok), cos[p:p + 1], sin[p:p + 1], cache.k, cache.v, slots[p:p + 1],
                                       p + 1, masked=False)[0])
    return out


def test_the_layers_attention_runs_inside_the_context(tmp_path, monkeypatch):
    """Forced on (as on CUDA), every SDPA call of the cached forward sees cuDNN off; the logits do not change."""
    base = load_hf_base(ModelConfig(source="hf", hf_path=str(tiny_hf_dir(tmp_path, "llama"))), torch.device("cpu"))
    with torch.no_grad():
        want = _decode(base, 6, 4, torch.device("cpu"))
    seen: list[bool] = []
    real_sdpa = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        seen.append(SDP.cudnn_sdp_enabled())
        return real_sdpa(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    monkeypatch.setattr(hf_cached, "attention_without_plans",
                        lambda device: torch.nn.attention.sdpa_kernel(list(hf_cached.PLANLESS_BACKENDS)))
    with torch.no_grad():
        got = _decode(base, 6, 4, torch.device("cpu"))
    assert len(seen) == 5 * base.cfg.n_layers and not any(seen), seen  # the prompt pass and 4 steps, every layer
    assert all(torch.equal(a, b) for a, b in zip(want, got))
    assert SDP.cudnn_sdp_enabled()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_bfloat16_cached_decode_never_calls_cudnn_attention(tmp_path):
    """On CUDA in bfloat16 (where torch would prefer cuDNN's attention on Hopper), no cached call reaches it, and the
    cached logits follow the whole-context pass."""
    dev = torch.device("cuda")
    d = tiny_hf_dir(tmp_path, "llama")
    base = load_hf_base(ModelConfig(source="hf", hf_path=str(d), hf_dtype="bfloat16"), dev)
    with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        steps = _decode(base, 24, 8, dev)
    ops = {e.key for e in prof.key_averages()}
    assert not any("cudnn_attention" in k for k in ops), sorted(k for k in ops if "attention" in k)
    assert any("attention" in k for k in ops), sorted(ops)[:40]  # the layers did attend through SDPA
    assert all(torch.isfinite(x).all() for x in steps)
