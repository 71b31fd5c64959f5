"""The base model's KV cache inside a session (mc.kv_cache, mc.decode) and sampling (mc.sampling).

Greedy decoding with the cache must give the same tokens as the cache-free reference
(``next_token_logits``: the whole working context through the base model), over 500 tokens with
a refocus every 32, on the tiny test geometry and on the cpu preset's geometry (untrained nets).
max_lod is raised by one in both so 540 tokens fit the budget until sessions of any length land.
"""
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from _tiny_config import TINY  # noqa: E402

from mc.build import build_controller  # noqa: E402
from mc.config_loading import load_config  # noqa: E402
from mc.decode import DecodeStats, decoder_for  # noqa: E402
from mc.kv_cache import first_changed  # noqa: E402
from mc.sampling import Sampler  # noqa: E402

GEOMETRIES = {"tiny": TINY + ["mc.max_lod=3"], "cpu": ["preset=cpu", "train.device=cpu", "mc.max_lod=2"],
              # the long preset's position mode past the window (540 tokens, a 64-token window)
              "tiny-entries": TINY + ["mc.max_lod=3", "mc.positions=entries"],
              "tiny-slots": TINY + ["mc.max_lod=3", "mc.positions=slots"],  # h100_smollm2's mode
              "tiny-no-qk-norm": TINY + ["mc.max_lod=3", "model.qk_norm=false"],  # the cached path skips the QK norms
              # branched refocus: the kept layout is one of several tried; the cache must follow it
              "tiny-branched": TINY + ["mc.max_lod=3", "allocator.inference.branches=3",
                                       "allocator.inference.branch_tail_tokens=4", "allocator.inference.branch_margin=0"],
              # each path's fit decodes 3 tokens ahead and rolls the session back: nothing of it may reach the cache
              "tiny-lookahead": TINY + ["mc.max_lod=3", "allocator.inference.branches=3", "allocator.inference.branch_margin=0",
                                        "allocator.inference.branch_tail_tokens=4", "allocator.inference.branch_lookahead=3",
                                        "allocator.inference.branch_unchanged=true"]}


def _ctrl(overrides):
    cfg = load_config(list(overrides) + ["allocator.inference.refocus_interval=32", "telemetry.jsonl=false"])
    return build_controller(cfg, device=torch.device("cpu"))


def _prompt(n=40):
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("geometry", sorted(GEOMETRIES))
def test_greedy_with_cache_equals_without(geometry):
    runs = {}
    for use_cache in (True, False):
        ctrl = _ctrl(GEOMETRIES[geometry])
        ctrl.begin_session(_prompt())
        stats = DecodeStats()
        runs[use_cache] = (ctrl.generate(500, use_cache=use_cache, stats=stats), stats)
    (a, st), (b, _) = runs[True], runs[False]
    assert len(st.refocus_log) == 16  # the 40-token prompt is due at the first token, then every 32
    assert torch.equal(a, b), f"first differing token at {(a != b).nonzero()[:1].tolist()}"
    if geometry in ("tiny-branched", "tiny-lookahead"):  # other paths than LensNet's were kept, so the cache followed a switch
        assert any(r.branch > 0 for r in ctrl.session.refocus_log)


def test_cache_recomputes_only_the_changed_suffix():
    ctrl = _ctrl(GEOMETRIES["cpu"])
    s = ctrl.begin_session(_prompt(100))
    dec = decoder_for(ctrl)
    ref = ctrl.next_token_logits()
    assert torch.allclose(dec.logits(s), ref, atol=1e-5)
    assert dec.last_recomputed == len(s.wc)  # a new session starts empty
    before = s.wc.entries
    ctrl.append(torch.tensor([7]), refocus=False)  # full budget: makes room by collapsing a group
    after = s.wc.entries
    first = first_changed(before, after)
    assert torch.allclose(dec.logits(s), ctrl.next_token_logits(), atol=1e-5)
    assert dec.last_recomputed == len(after) - first
    calls = []
    real = type(ctrl.base).forward_cached

    def spy(self, embeds, cos, sin, k, v, slots, window, masked=True):
        calls.append((embeds.shape[1], window, masked))
        return real(self, embeds, cos, sin, k, v, slots, window, masked)

    type(ctrl.base).forward_cached = spy
    try:
        dec.logits(s)  # nothing changed: only the last entry runs (its logits are the output)
    finally:
        type(ctrl.base).forward_cached = real
    assert dec.last_recomputed == 1
    assert calls == [(1, len(after), False)]  # eager step: exactly the n valid keys, no mask


def test_sampler_greedy_topk_and_seed():
    logits = torch.tensor([0.0, 3.0, 2.9, -5.0])
    assert int(Sampler()(logits)) == 1
    draws = [int(Sampler(1.0, top_k=2, seed=s)(logits)) for s in range(60)]
    assert set(draws) == {1, 2}  # top-2 only, and both occur
    assert [int(Sampler(1.0, seed=3)(logits)) for _ in range(3)] == [int(Sampler(1.0, seed=3)(logits)) for _ in range(3)]
    with pytest.raises(ValueError, match="temperature"):
        Sampler(-1.0)
    with pytest.raises(ValueError, match="top_k"):
        Sampler(1.0, top_k=-2)


def test_compiled_decode_step_matches_the_reference_without_recompiles():
    """compile.decode=default (CPU inductor; the same torch.compile call as on GPU, minus CUDA graphs):
    every step's logits match the cache-free reference, the one-entry step and the suffix recomputes after
    collapses and refocuses both run compiled (two graphs: the suffix's length is dynamic), and suffixes of
    many lengths later compile nothing new. In a fresh interpreter: Dynamo state must not leak between tests."""
    from _subproc import MARK, run_script  # noqa: PLC0415

    out = run_script(f"""
import json, torch
from torch._dynamo.utils import counters
from mc.build import build_controller
from mc.config_loading import load_config
from mc.decode import decoder_for
cfg = load_config({TINY!r} + ["mc.max_lod=3", "compile.decode=default", "telemetry.jsonl=false"])
ctrl = build_controller(cfg, device=torch.device("cpu"))
ctrl.begin_session(torch.randint(0, 256, (40,), generator=torch.Generator().manual_seed(0)))
dec = decoder_for(ctrl)
worst, frames, suffixes = 0.0, [], []
for i in range(160):
    got = dec.logits(ctrl.session)
    want = ctrl.next_token_logits()
    worst = max(worst, float((got - want).abs().max()))
    if dec.last_recomputed > 1:
        suffixes.append((i, dec.last_recomputed))
    ctrl.append(want.argmax().view(1), refocus=False)
    if i % 32 == 31:
        ctrl.refocus()
    frames.append(int(counters["stats"]["unique_graphs"]))
print({MARK!r} + json.dumps({{"worst": worst, "frames": frames, "ladder": list(cfg.mc.bucket_ladder),
                             "suffixes": suffixes}}))
""", timeout=600)
    assert out["worst"] < 1e-4, out["worst"]
    frames, half = out["frames"], len(out["frames"]) // 2
    assert 2 <= frames[-1] <= 2 * len(out["ladder"]), frames  # a step and a suffix graph per bucket at most
    assert frames[-1] == frames[half], frames  # none in the second half ...
    late = {n for i, n in out["suffixes"] if i >= half}
    assert len(late) >= 3, out["suffixes"]  # ... though suffixes of several lengths ran there


def test_compiled_decoders_of_two_base_models_in_one_process_each_match_their_reference():
    """The compiled step and suffix leave out Dynamo's guards on nn.Module state (mc.decode.compile_decode_fn), and
    Dynamo caches graphs per code object, not per decoder. Two base models whose decode calls take arguments of the
    same shapes, one with QK-norm and one without (one more rms_norm per head, and its weight), must still not share
    a graph: each decoder, used in turns, matches its own model's cache-free logits. In a fresh interpreter."""
    from _subproc import MARK, run_script  # noqa: PLC0415

    out = run_script(f"""
import json, torch
from mc.build import build_controller
from mc.config_loading import load_config
from mc.decode import decoder_for
worst = {{}}
ctrls = {{}}
for name, extra in (("qk_norm", []), ("plain", ["model.qk_norm=false"])):
    cfg = load_config({TINY!r} + ["mc.max_lod=3", "compile.decode=default", "telemetry.jsonl=false"] + extra)
    torch.manual_seed(0)
    ctrls[name] = build_controller(cfg, device=torch.device("cpu"))
    ctrls[name].begin_session(torch.randint(0, 256, (40,), generator=torch.Generator().manual_seed(1)))
for turn in range(3):
    for name, ctrl in ctrls.items():
        dec = decoder_for(ctrl)
        for i in range(20):
            got, want = dec.logits(ctrl.session), ctrl.next_token_logits()
            worst[name] = max(worst.get(name, 0.0), float((got - want).abs().max()))
            ctrl.append(want.argmax().view(1), refocus=False)
print({MARK!r} + json.dumps(worst))
""", timeout=600)
    assert set(out) == {"qk_norm", "plain"}
    assert max(out.values()) < 1e-4, out


def test_cached_decode_refuses_non_finite_logits():
    """Weights that go NaN after loading (nothing checks them then): the cached path raises, it does not sample id 0."""
    ctrl = _ctrl(GEOMETRIES["tiny"])
    ctrl.begin_session(_prompt(12))
    with torch.no_grad():
        ctrl.base.lm_head.weight[3, 0] = float("nan")
    with pytest.raises(FloatingPointError, match="generate: the base model returned 1 non-finite logit"):
        ctrl.generate(2)
