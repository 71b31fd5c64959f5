"""LensNet's token index (mc.nets.token_index): the span maximum, training and inference agreeing with a brute-force
reference, the session's key cache surviving rollbacks, the match reaching the scores, and its config checks."""
from __future__ import annotations

import pytest
import torch

from mc.build import build_controller
from mc.config import ConfigError
from mc.config_loading import load_config
from mc.gather import gather_tables
from mc.nets.losses import index_locate_loss
from mc.nets.token_index import TokenIndex, session_match, span_max_levels, training_match
from mc.working_context import WorkingContext

from tests._tiny_config import K, TINY

INDEX = ["lensnet.token_index=8", "lensnet.index_window=3"]


def _ctrl(seed: int = 0, query: str = "pooled", *extra: str):
    torch.manual_seed(seed)
    return build_controller(load_config([*TINY, *INDEX, f"lensnet.index_query={query}", "telemetry.jsonl=false",
                                         *extra]), device="cpu")


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


@pytest.mark.parametrize("query", ["pooled", "twin"])
@torch.no_grad()
def test_session_match_is_each_entrys_best_token_match_and_follows_rollbacks(query):
    ctrl = _ctrl(0, query)
    mc, index = ctrl.cfg.mc, ctrl.lensnet.index
    ids = torch.randint(3, 200, (150,), generator=torch.Generator().manual_seed(1))
    s = ctrl.begin_session(ids[:100])
    ctrl.session_scores(s)  # fills the key cache for 100 tokens
    snap = s.snapshot()
    ctrl.append(ids[100:], refocus=False)

    def check():
        mwc = s.materialize()
        got = session_match(index, s, mwc, block_size=mc.block_size, recent_tokens=mc.recent_tokens)[: mwc.length]
        ref = _reference(index, ctrl.base.embed(s.history()[None])[0], mc.recent_tokens)
        want = _entry_max(ref, [s.wc.span(i) for i in range(len(s.wc))])
        assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()
        assert torch.count_nonzero(got) == len(s.wc)

    for _ in range(2):  # the cache extended; then rolled back and replaced by other tokens: recomputed, not trusted
        check()
        group = next(iter(s.wc.collapsible()))
        s.wc.collapse(group)  # another layout of the same history: the match table made for it is read again
        check()
        s.restore(snap)
        ctrl.append(torch.flip(ids[100:], [0]) + 1, refocus=False)
    s.restore(snap)
    check()  # the shorter history of the snapshot: its own table, not the longer one's


@pytest.mark.parametrize("query", ["pooled", "twin"])
def test_training_match_gathers_the_same_values_as_the_reference_for_every_variant(query):
    ctrl = _ctrl(1, query)
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
    got, token_got = training_match(index, embeds, tables["index"], torch.full((2,), t), mc)
    for r, wc in enumerate(wcs):
        ref = _reference(index, embeds[r // 2].detach(), mc.recent_tokens)
        assert torch.allclose(token_got[r // 2].detach(), index.loss_logits(ref).detach(), atol=1e-4)
        want = _entry_max(ref, [wc.span(i) for i in range(len(wc))])
        assert torch.allclose(got[r, : len(wc)].detach(), want.detach(), atol=1e-5)
        assert torch.all(got[r, len(wc):] == 0)


def test_the_training_query_stops_where_the_answer_starts():
    """A recall row's query reads the windows before its answer (what a session has read when it refocuses), not
    the tail's last ones; the end comes from train_step's query_ends, and a bad one is refused up front."""
    ctrl = _ctrl(3)
    mc, index = ctrl.cfg.mc, ctrl.lensnet.index
    t, r = mc.history_tokens, mc.recent_tokens
    ids = torch.randint(3, 200, (2, t), generator=torch.Generator().manual_seed(8))
    embeds = ctrl.base.embed(ids)
    _, token_match = training_match(index, embeds, torch.zeros(1, 1, dtype=torch.long), torch.tensor([t - 5, t]), mc)
    feats = index.features(embeds)
    for row, end in ((0, t - 5), (1, t)):
        want = index.match(index.keys(feats[row:row + 1]), index.pooled_query(feats[row:row + 1, end - r:end]))[0]
        assert torch.allclose(token_match[row], want, atol=1e-5)
    whole_tail = _reference(index, embeds[0], r)
    assert (token_match[0] - whole_tail).abs().max() > 0.05 * whole_tail.abs().max()  # the end matters
    plan = ctrl.prepare_step(ids, torch.Generator().manual_seed(9), query_ends=[t - 5, None])
    assert plan.query_end.tolist() == [t - 5, t]
    for bad in ([t - 5], [t + 1, None], [r - 1, None]):
        with pytest.raises(ValueError, match="query_ends"):
            ctrl.prepare_step(ids, torch.Generator().manual_seed(9), query_ends=bad)


def test_a_twin_query_starts_as_the_newest_windows_similarity_under_the_keys_projection():
    """index_query=twin: no query projection of its own; at init the pool leans on the newest window (slope 3), the
    match is the cosine (a token whose window equals the question's newest one matches ~1) and the index loss reads
    it times the temperature (10 at init)."""
    ctrl = _ctrl(4, "twin")
    index, r = ctrl.lensnet.index, ctrl.cfg.mc.recent_tokens
    assert index.query is None and float(index.recency.detach()) == 3.0
    ids = torch.randint(3, 200, (60,), generator=torch.Generator().manual_seed(5))
    ids = torch.cat([ids, ids[20:30]])  # the tail's newest windows repeat tokens 20-29
    with torch.no_grad():
        index.pool.weight.zero_()  # content-free pool: the recency slope alone weights the tail
        feats = index.features(ctrl.base.embed(ids[None]))
        m = index.match(index.keys(feats), index.pooled_query(feats[:, -r:]))[0]
        weights = torch.softmax(3.0 * torch.arange(1 - r, 1.0), 0)
        q = index.key(torch.einsum("r,rd->d", weights, feats[0, -r:]))
        want = torch.nn.functional.cosine_similarity(index.key(feats[0]), q[None], dim=-1)
        assert torch.allclose(index.loss_logits(m[None])[0], 10.0 * m, atol=1e-5)
    assert torch.allclose(m, want, atol=1e-5)
    assert int(m[:60].argmax()) == 29  # the window ending where the repeat's newest token first occurred


@pytest.mark.parametrize("query", ["pooled", "twin"])
def test_the_match_moves_the_scores_and_the_losses_train_the_index(query):
    ctrl = _ctrl(2, query, "mc.index_loss_weight=1.0")  # a twin's temperature is the index loss's alone
    s = ctrl.begin_session(torch.randint(3, 200, (120,), generator=torch.Generator().manual_seed(3)))
    with_match = ctrl.session_scores(s)
    without = ctrl.lensnet_scores(s.materialize(), s.num_tokens)[: len(s.wc)].cpu()  # zeros in place of the match
    assert not torch.allclose(with_match, without)
    out = ctrl.train_step(torch.randint(3, 200, (1, ctrl.cfg.mc.history_tokens)), torch.Generator().manual_seed(4),
                          [(20, 30)])
    out.total.backward()
    grads = [p.grad for p in ctrl.lensnet.index.parameters()] + [ctrl.lensnet.index_gain.grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads[:-1]) and ctrl.lensnet.index_gain.grad.abs() > 0
    if query == "twin":  # its slope and temperature are learned too
        assert ctrl.lensnet.index.recency.grad.abs() > 0 and ctrl.lensnet.index.log_temperature.grad.abs() > 0


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


def test_index_locate_loss_is_the_records_share_of_the_history_softmax():
    """Row 0 has a record before the tail, row 1 is a corpus row, row 2's record lies inside the LOD0 tail (the
    question's own tokens are not candidates): only row 0 carries loss, the cross-entropy of its record's tokens."""
    m = torch.randn(3, 12, generator=torch.Generator().manual_seed(0))
    spans = torch.tensor([[2, 5], [-1, -1], [10, 12]])
    want = torch.logsumexp(m[0, :9], 0) - torch.logsumexp(m[0, 2:5], 0)
    assert torch.allclose(index_locate_loss(m, spans, recent_tokens=3), want)
    on_record, on_decoy = torch.zeros(1, 12), torch.zeros(1, 12)
    on_record[0, 3], on_decoy[0, 7] = 30.0, 30.0  # all the mass on the record, or on another record
    assert float(index_locate_loss(on_record, spans[:1], recent_tokens=3)) < 1e-6
    assert float(index_locate_loss(on_decoy, spans[:1], recent_tokens=3)) > 25.0
    assert float(index_locate_loss(m[1:], spans[1:], recent_tokens=3)) == 0.0
    with pytest.raises(ValueError, match=r"expected \(3, 2\)"):
        index_locate_loss(m, spans[:2], recent_tokens=3)


def test_the_index_loss_joins_the_objective_and_trains_the_index():
    """mc.index_loss_weight: the train step's total grows by weight * the loss over the step's token matches on rows
    with a record span, and that term alone sends gradient into the index."""
    outs, ctrls = [], []
    for weight in (0.0, 0.5):
        torch.manual_seed(5)
        ctrl = build_controller(load_config([*TINY, *INDEX, f"mc.index_loss_weight={weight}", "telemetry.jsonl=false"]),
                                device="cpu")
        ids = torch.randint(3, 200, (2, ctrl.cfg.mc.history_tokens), generator=torch.Generator().manual_seed(6))
        outs.append(ctrl.train_step(ids, torch.Generator().manual_seed(7), [(20, 30), None]))
        ctrls.append(ctrl)
    ctrl, mc = ctrls[1], ctrls[1].cfg.mc
    _, token_match = training_match(ctrl.lensnet.index, ctrl.base.embed(ids), torch.zeros(1, 1, dtype=torch.long),
                                    torch.full((2,), ids.shape[1]), mc)
    loss = index_locate_loss(token_match, torch.tensor([[20, 30], [-1, -1]]), mc.recent_tokens)
    assert float(loss.detach()) > 1.0  # an untrained index spreads its match over the history
    assert torch.allclose(outs[1].total - outs[0].total, 0.5 * loss, atol=1e-5)
    (outs[1].total - outs[0].total.detach()).backward()
    assert ctrl.lensnet.index.conv.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("key,value", [("lensnet.token_index", -1), ("lensnet.index_window", 0),
                                       ("mc.index_loss_weight", -1.0), ("lensnet.index_query", "tied")])
def test_bad_index_settings_stop_at_start_up(key, value):
    with pytest.raises(ConfigError, match=key):
        load_config([*TINY, *INDEX, f"{key}={value}"])


def test_an_index_loss_without_an_index_stops_at_start_up():
    with pytest.raises(ConfigError, match="mc.index_loss_weight.*lensnet.token_index > 0"):
        load_config([*TINY, "mc.index_loss_weight=1.0"])


@pytest.mark.parametrize("query", ["pooled", "twin"])
def test_the_index_reads_through_a_real_model_adapter(tmp_path, query):
    """model=hf (a tiny random Llama through the adapter, as SmolLM2 is read): a stage-2 step trains the index, and
    greedy decoding with refocuses (whose lookahead appends and reverts tokens: the key cache must follow) gives the
    same tokens with and without the KV cache."""
    pytest.importorskip("transformers", reason="model=hf needs the hf extra (scripts/setup_env.sh installs it)")
    from _hf_models import tiny_hf_dir  # noqa: PLC0415 - needs transformers

    d = tiny_hf_dir(tmp_path, "llama", 0.25)
    torch.manual_seed(0)
    ctrl = build_controller(load_config(["preset=smoke", "model=hf", f"model.hf_path={d}", "train.device=cpu",
                                         "lensnet.token_index=8", f"lensnet.index_query={query}",
                                         "mc.index_loss_weight=1.0", "allocator.inference.branches=2",
                                         "allocator.inference.branch_lookahead=2"]), device=torch.device("cpu"))
    ids = torch.randint(3, ctrl.cfg.model.vocab_size, (1, ctrl.cfg.mc.history_tokens))
    t = ids.shape[1]
    ctrl.train_step(ids, torch.Generator().manual_seed(0), [(t // 4, t // 4 + 8)], query_ends=[t - 4]).total.backward()
    assert ctrl.lensnet.index.conv.weight.grad.abs().sum() > 0
    prompt = torch.randint(3, ctrl.cfg.model.vocab_size, (300,), generator=torch.Generator().manual_seed(1))
    outs = []
    for use_cache in (True, False):
        ctrl.begin_session(prompt)
        outs.append(ctrl.generate(40, use_cache=use_cache))
        assert len(ctrl.session.refocus_log) >= 1
    assert torch.equal(outs[0], outs[1])
