"""LensNet's token index (mc.nets.token_index): the span maximum, training and inference agreeing with a brute-force
reference, the session's key cache surviving rollbacks, the match reaching the scores, and its config checks."""
from __future__ import annotations

import pytest
import torch

from mc.build import build_controller
from mc.config import ConfigError
from mc.config_loading import load_config
from mc.gather import gather_tables
from mc.nets.token_index import TokenIndex, session_match, span_max_levels, training_match
from mc.working_context import WorkingContext

from tests._tiny_config import K, TINY

INDEX = ["lensnet.token_index=8", "lensnet.index_window=3"]


def _ctrl(seed: int = 0):
    torch.manual_seed(seed)
    return build_controller(load_config([*TINY, *INDEX, "telemetry.jsonl=false"]), device="cpu")


def _reference(index: TokenIndex, embeds_td: torch.Tensor, recent: int) -> torch.Tensor:
    """``[T]`` token matches computed the plain way: every window over the whole history at once."""
    feats = index.features(embeds_td[None])
    return index.match(index.keys(feats), index.pooled_query(feats[:, -recent:]))[0]


def _entry_max(match_t: torch.Tensor, spans) -> torch.Tensor:
    return torch.stack([match_t[a:b].max() for a, b in spans])


def test_span_max_levels_takes_each_nodes_maximum_over_complete_blocks():
    x = torch.tensor([[3.0, -1.0, 0.5, 2.0, 7.0, 1.0, -2.0, 0.0, 9.0]])  # 9 tokens, K=2: a ninth token completes nothing
    lv = span_max_levels(x, 2, 2)
    assert torch.equal(lv[1], torch.tensor([[3.0, 2.0, 7.0, 0.0]]))
    assert torch.equal(lv[2], torch.tensor([[3.0, 7.0]]))


@torch.no_grad()
def test_session_match_is_each_entrys_best_token_match_and_follows_rollbacks():
    ctrl = _ctrl()
    mc, index = ctrl.cfg.mc, ctrl.lensnet.index
    ids = torch.randint(3, 200, (150,), generator=torch.Generator().manual_seed(1))
    s = ctrl.begin_session(ids[:100])
    ctrl._session_scores(s)  # fills the key cache for 100 tokens
    snap = s.snapshot()
    ctrl.append(ids[100:], refocus=False)
    for _ in range(2):  # the cache extended; then rolled back and replaced by other tokens: recomputed, not trusted
        mwc = s.materialize()
        got = session_match(index, s, mwc, block_size=mc.block_size, recent_tokens=mc.recent_tokens)[: mwc.length]
        ref = _reference(index, ctrl.base.embed(s.history()[None])[0], mc.recent_tokens)
        want = _entry_max(ref, [s.wc.span(i) for i in range(len(s.wc))])
        assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()
        assert torch.count_nonzero(got) == len(s.wc)
        s.restore(snap)
        ctrl.append(torch.flip(ids[100:], [0]) + 1, refocus=False)


def test_training_match_gathers_the_same_values_as_the_reference_for_every_variant():
    ctrl = _ctrl(1)
    mc, index = ctrl.cfg.mc, ctrl.lensnet.index
    t = mc.history_tokens
    ids = torch.randint(3, 200, (2, t), generator=torch.Generator().manual_seed(2))
    wcs = []
    for b in range(2):
        for fill in (True, False):  # two layouts of the same history: recency-graded and the coarsest
            wcs.append(WorkingContext.build(t, fill=fill, block_size=K, max_lod=mc.max_lod,
                                            max_entries=mc.max_entries, recent_tokens=mc.recent_tokens))
    tables = gather_tables(wcs, batch=2, tokens=t, max_lod=mc.max_lod, bucket=ctrl.train_bucket)
    embeds = ctrl.base.embed(ids)
    got = training_match(index, embeds, tables["index"], block_size=K, max_lod=mc.max_lod,
                         recent_tokens=mc.recent_tokens)
    for r, wc in enumerate(wcs):
        ref = _reference(index, embeds[r // 2].detach(), mc.recent_tokens)
        want = _entry_max(ref, [wc.span(i) for i in range(len(wc))])
        assert torch.allclose(got[r, : len(wc)].detach(), want.detach(), atol=1e-5)
        assert torch.all(got[r, len(wc):] == 0)


def test_the_match_moves_the_scores_and_the_losses_train_the_index():
    ctrl = _ctrl(2)
    s = ctrl.begin_session(torch.randint(3, 200, (120,), generator=torch.Generator().manual_seed(3)))
    with_match = ctrl._session_scores(s)
    without = ctrl.lensnet_scores(s.materialize(), s.num_tokens)[: len(s.wc)].cpu()  # zeros in place of the match
    assert not torch.allclose(with_match, without)
    out = ctrl.train_step(torch.randint(3, 200, (1, ctrl.cfg.mc.history_tokens)), torch.Generator().manual_seed(4))
    out.total.backward()
    grads = [p.grad for p in ctrl.lensnet.index.parameters()] + [ctrl.lensnet.index_gain.grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads[:-1]) and ctrl.lensnet.index_gain.grad.abs() > 0


def test_lensnet_refuses_a_match_it_cannot_use():
    ctrl = _ctrl()
    x = torch.randn(1, 5, ctrl.cfg.model.d_model)
    args = (x, torch.ones(1, 5, dtype=torch.bool), torch.zeros(1, 5), torch.zeros(1, 5, dtype=torch.long),
            torch.full((1,), 5.0))
    with pytest.raises(ValueError, match="token index got match=None"):
        ctrl.lensnet(*args)
    with pytest.raises(ValueError, match=r"\(1, 4\)"):
        ctrl.lensnet(*args, torch.zeros(1, 4))
    plain = build_controller(load_config([*TINY, "telemetry.jsonl=false"]), device="cpu")
    with pytest.raises(ValueError, match="without a token index"):
        plain.lensnet(*args, torch.zeros(1, 5))


@pytest.mark.parametrize("key,value", [("lensnet.token_index", -1), ("lensnet.index_window", 0)])
def test_bad_index_settings_stop_at_start_up(key, value):
    with pytest.raises(ConfigError, match=key):
        load_config([*TINY, f"{key}={value}"])


def test_the_index_reads_through_a_real_model_adapter(tmp_path):
    """model=hf (a tiny random Llama through the adapter, as SmolLM2 is read): a stage-2 step trains the index, and
    greedy decoding with refocuses (whose lookahead appends and reverts tokens: the key cache must follow) gives the
    same tokens with and without the KV cache."""
    pytest.importorskip("transformers", reason="model=hf needs the hf extra (scripts/setup_env.sh installs it)")
    from _hf_models import tiny_hf_dir  # noqa: PLC0415 - needs transformers

    d = tiny_hf_dir(tmp_path, "llama", 0.25)
    torch.manual_seed(0)
    ctrl = build_controller(load_config(["preset=smoke", "model=hf", f"model.hf_path={d}", "train.device=cpu",
                                         "lensnet.token_index=8", "allocator.inference.branches=2",
                                         "allocator.inference.branch_lookahead=2"]), device=torch.device("cpu"))
    ids = torch.randint(3, ctrl.cfg.model.vocab_size, (1, ctrl.cfg.mc.history_tokens))
    ctrl.train_step(ids, torch.Generator().manual_seed(0)).total.backward()
    assert ctrl.lensnet.index.conv.weight.grad.abs().sum() > 0
    prompt = torch.randint(3, ctrl.cfg.model.vocab_size, (300,), generator=torch.Generator().manual_seed(1))
    outs = []
    for use_cache in (True, False):
        ctrl.begin_session(prompt)
        outs.append(ctrl.generate(40, use_cache=use_cache))
        assert len(ctrl.session.refocus_log) >= 1
    assert torch.equal(outs[0], outs[1])
