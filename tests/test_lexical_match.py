"""The token index's exact-token queries, ``lexical`` (a node's best shared token) and ``overlap`` (the sum over the
distinct asked ids under a node of 1 / their count): mc.nets.lexical_match."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from mc.config_loading import load_config
from mc.nets.lexical_match import lexical_token_match, overlap_levels
from mc.nets.token_index import SessionKeys, TokenIndex, span_max_levels, training_match


def test_shared_tokens_score_their_rarity_and_the_question_scores_nothing():
    #                   0  1  2  3  4  5  6  7 | query window (r = 3): 9 3 4
    ids = torch.tensor([[5, 9, 7, 9, 3, 9, 8, 1, 9, 3, 4]])
    m = lexical_token_match(ids, torch.tensor([11]), 3)[0]
    idf9, idf3 = math.log(9 / 3.5), math.log(9 / 1.5)  # 8 searched tokens; 9 occurs 3 times, 3 once, 4 never
    want = torch.tensor([0, idf9, 0, idf9, idf3, idf9, 0, 0, 0, 0, 0]) / idf3
    assert torch.allclose(m, want), m
    assert m[4] == 1.0 and m[8:].abs().sum() == 0  # the rarest shared token scores 1; the window itself 0


def test_the_query_window_ends_at_query_end_and_what_follows_scores_nothing():
    ids = torch.tensor([[2, 6, 2, 8, 6, 5, 6, 6]])  # the question "6" at 4, the answer "5 6 6" after it
    m = lexical_token_match(ids, torch.tensor([5]), 1)[0]
    assert m.tolist() == [0, 1, 0, 0, 0, 0, 0, 0]  # only the 6 before the window; nothing from the window on


def test_no_shared_token_gives_zeros_and_rows_are_independent():
    ids = torch.tensor([[1, 2, 3, 4, 7, 7], [1, 2, 3, 4, 3, 1]])
    m = lexical_token_match(ids, torch.tensor([6, 6]), 2)
    assert m[0].abs().sum() == 0 and m[1].tolist() == [1, 0, 1, 0, 0, 0]
    with pytest.raises(ValueError, match="lexical_token_match needs"):
        lexical_token_match(ids[0], torch.tensor([6]), 2)


def _levels(query: str, ids_bt: torch.Tensor, end_b: torch.Tensor, r: int, k: int, levels: int) -> list:
    """The node values of every level a query's training step and session table should hold."""
    if query == "overlap":
        return overlap_levels(ids_bt, end_b, r, k, levels)
    return span_max_levels(lexical_token_match(ids_bt, end_b, r), k, levels)


@pytest.mark.parametrize("query", ["lexical", "overlap"])
def test_session_table_equals_the_training_match_and_follows_a_rollback(query):
    """What a session's refocus reads for a history equals the training step's match with the question at its end;
    a history rolled back and refilled with other tokens is matched afresh."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 12, (64,), generator=g)
    index = TokenIndex(16, 1, 4, query=query)
    assert index.lexical and index.overlap == (query == "overlap") and not list(index.parameters())
    mc = SimpleNamespace(recent_tokens=8, block_size=4, max_lod=2)
    levels = _levels(query, ids[None], torch.tensor([64]), 8, 4, 2)
    flat_train = torch.cat([lv.reshape(-1) for lv in levels] + [levels[0].new_zeros(1)])
    got, per_token = training_match(index, torch.zeros(1, 64, 16), torch.arange(flat_train.numel())[None], torch.tensor([64]),
                                    mc, ids[None])
    assert torch.equal(got[0], flat_train) and torch.equal(per_token, levels[0])
    keys = SessionKeys()
    keys.update(index, ids, torch.zeros(64, 16))
    table, offsets = keys.match_table(index, 64, block_size=4, max_lod=2, recent_tokens=8)
    assert torch.equal(table, flat_train[:-1]) and offsets.tolist() == [0, 64, 80]
    other = ids.clone()
    other[40:] = (other[40:] + 1) % 12  # a rollback to 40 tokens, then other tokens
    keys.update(index, other, torch.zeros(64, 16))
    table2, _ = keys.match_table(index, 64, block_size=4, max_lod=2, recent_tokens=8)
    assert torch.equal(table2, torch.cat([lv[0] for lv in _levels(query, other[None], torch.tensor([64]), 8, 4, 2)]))
    with pytest.raises(ValueError, match="reads token ids"):
        training_match(index, torch.zeros(1, 64, 16), torch.zeros(1, 1, dtype=torch.long), torch.tensor([64]), mc)


@pytest.mark.parametrize("query", ["lexical", "overlap"])
def test_config_refuses_the_index_loss_with_an_exact_token_query(query):
    load_config(["preset=smoke", "lensnet.token_index=1", f"lensnet.index_query={query}"])
    with pytest.raises(Exception, match=f"{query} query has none"):
        load_config(["preset=smoke", "lensnet.token_index=1", f"lensnet.index_query={query}", "mc.index_loss_weight=1.0"])


def test_overlap_sums_the_distinct_asked_ids_under_each_node_by_their_rarity():
    # K = 2. Query window (r = 3) at 8..10: ids 9, 3, 9 -> distinct asked ids {9, 3}; before it 9 occurs 3 times
    # (weight 1/3) and 3 once (weight 1); 4 is not asked.
    #                   0  1  2  3  4  5  6  7 | 8  9 10
    ids = torch.tensor([[5, 9, 7, 9, 3, 9, 4, 4, 9, 3, 9]])
    lv0, lv1, lv2 = overlap_levels(ids, torch.tensor([11]), 3, 2, 2)
    third = 1.0 / 3.0
    assert torch.allclose(lv0[0], torch.tensor([0, third, 0, third, 1, third, 0, 0, 0, 0, 0]))  # the window scores 0
    # level 1 nodes (0,1) (2,3) (4,5) (6,7) (8,9): node (4,5) holds 3 and 9 -> 1 + 1/3, the best; (8,9) is the window
    want1 = torch.tensor([third, third, 1 + third, 0, 0]) / (1 + third)
    assert torch.allclose(lv1[0], want1)
    # level 2 nodes 0..3 (9 only: 1/3) and 4..7 (3 and 9 once each, not 9 twice: 1 + 1/3)
    assert torch.allclose(lv2[0], torch.tensor([0.25, 1.0]))


def test_overlap_matches_a_brute_force_reference_and_is_zero_where_nothing_is_shared():
    g = torch.Generator().manual_seed(4)
    ids = torch.randint(0, 9, (3, 40), generator=g)
    ends = torch.tensor([40, 31, 17])
    r, k = 5, 3
    got = overlap_levels(ids, ends, r, k, 2)
    for b in range(3):
        e = int(ends[b])
        asked = set(ids[b, e - r:e].tolist())
        hist = ids[b, : e - r].tolist()
        weight = {i: 1.0 / hist.count(i) for i in asked if i in hist}
        for level in range(3):
            size = k ** level
            under = [{int(ids[b, p]) for p in range(n * size, min((n + 1) * size, e - r))} for n in range(40 // size)]
            raw = [sum(weight.get(i, 0.0) for i in node) for node in under]
            top = max(raw)
            want = torch.tensor([x / top if top > 0 else 0.0 for x in raw])
            assert torch.allclose(got[level][b], want, atol=1e-6), (b, level)
    none = overlap_levels(torch.tensor([[1, 2, 3, 4, 7, 8]]), torch.tensor([6]), 2, 2, 1)
    assert all(lv.abs().sum() == 0 for lv in none)
    with pytest.raises(ValueError, match="overlap_levels needs"):
        overlap_levels(ids[0], ends[:1], r, k, 2)


@pytest.mark.parametrize("query", ["lexical", "overlap"])
def test_a_controller_with_an_exact_token_index_trains_on_the_ids_match_and_scores_sessions(monkeypatch, query):
    """Through the controller: a stage-2 step hands LensNet the match of its own token ids (the index has no
    parameters), a session's scores move with the match, and decoding with refocuses (whose lookahead appends and
    reverts tokens) gives the same tokens with and without the KV cache."""
    import mc.controller as controller_module  # noqa: PLC0415
    from mc.build import build_controller  # noqa: PLC0415
    from tests._tiny_config import TINY  # noqa: PLC0415

    seen = []

    def spy(*args, **kwargs):
        out = training_match(*args, **kwargs)
        seen.append((args[5], args[3], out[1]))
        return out

    monkeypatch.setattr(controller_module, "training_match", spy)

    torch.manual_seed(0)
    ctrl = build_controller(load_config([*TINY, "lensnet.token_index=1", f"lensnet.index_query={query}",
                                         "allocator.inference.branches=2", "allocator.inference.branch_lookahead=2",
                                         "allocator.inference.branch_tail_tokens=4", "telemetry.jsonl=false"]),
                            device="cpu")
    assert not list(ctrl.lensnet.index.parameters())
    t = ctrl.cfg.mc.history_tokens
    ids = torch.randint(3, 200, (1, t), generator=torch.Generator().manual_seed(1))
    ids[0, t - 6:t - 3] = ids[0, 40:43]  # the question repeats three tokens of the history
    ctrl.train_step(ids, torch.Generator().manual_seed(2), [(40, 48)], query_ends=[t - 3]).total.backward()
    (step_ids, query_end, token_match), = seen
    assert torch.equal(step_ids.cpu(), ids) and query_end.tolist() == [t - 3]
    r, end = ctrl.cfg.mc.recent_tokens, torch.tensor([t - 3])
    want = (lexical_token_match(ids, end, r) if query == "lexical"
            else overlap_levels(ids, end, r, ctrl.cfg.mc.block_size, ctrl.cfg.mc.max_lod)[0])
    assert torch.equal(token_match, want)
    assert token_match[0, 40:43].min() > 0  # the question's three tokens are found where the history holds them
    assert ctrl.lensnet.index_gain.grad is not None  # LensNet's gain is in the graph of the step's loss
    prompt = torch.randint(3, 200, (120,), generator=torch.Generator().manual_seed(3))
    prompt[-4:] = prompt[30:34]
    s = ctrl.begin_session(prompt)
    with_match = ctrl.session_scores(s)
    without = ctrl.lensnet_scores(s.materialize(), s.num_tokens)[: len(s.wc)].cpu()  # zeros in place of the match
    assert not torch.allclose(with_match, without)
    outs = []
    for use_cache in (True, False):
        ctrl.begin_session(prompt)
        outs.append(ctrl.generate(24, use_cache=use_cache))
    assert torch.equal(outs[0], outs[1])
