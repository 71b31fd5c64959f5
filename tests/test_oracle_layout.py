"""The oracle's planned layout: the needle at LOD0 exactly where the budget allows it, answer first,
neighbours next, every invariant kept, and the layout holding while the session decodes."""
from __future__ import annotations

import random

import pytest
import torch

from mc.eval.focus_policies import multi_span_oracle_refocus, oracle_refocus
from mc.eval.oracle_layout import ORACLE_RESTS, plan_oracle_layout
from mc.working_context import WorkingContext

from test_eval import fake_run, tiny_cfg


def wc_of(num_tokens: int, *, K: int = 4, max_lod: int = 2, W: int = 32, tail: int = 8) -> WorkingContext:
    return WorkingContext.build(num_tokens, block_size=K, max_lod=max_lod, max_entries=W, recent_tokens=tail)


def min_entries_for_lod0(wc: WorkingContext, span: tuple[int, int]) -> int:
    """The fewest entries of any valid layout with ``span`` at LOD0 (brute arithmetic, independent of the plan):
    the coarsest layout plus K - 1 for every gist above the span's tokens that must be opened."""
    coarse = WorkingContext.build(wc.num_tokens, block_size=wc.block_size, max_lod=wc.max_lod,
                                  max_entries=10 ** 9, recent_tokens=wc.recent_tokens, fill=False)
    K, opened = wc.block_size, set()
    tail = coarse.tail_start()
    for t in range(*span):
        if t >= tail:
            continue
        top = next(lod for lod, idx in coarse.entries if idx * K ** lod <= t < (idx + 1) * K ** lod)
        opened.update((lod, t // K ** lod) for lod in range(1, top + 1))
    return len(coarse) + (K - 1) * len(opened)


def lods_of(wc: WorkingContext, a: int, b: int) -> set[int]:
    return set(wc.lod_map()[a:b].tolist())


@pytest.mark.parametrize("rest", ORACLE_RESTS)
def test_the_needle_reaches_lod0_exactly_where_the_budget_allows(rest):
    """Over random histories, spans and budgets: the plan holds the span at LOD0 iff some valid layout of that
    budget does, and it is always a valid layout of the same history (whichever way it spends the rest)."""
    rng = random.Random(0)
    hits = misses = 0
    for _ in range(300):
        K = rng.choice([2, 4, 8])
        tail = rng.choice([0, K, 2 * K])
        W = rng.choice([16, 24, 32, 48, 64])
        n = rng.randint(K, 900)
        try:
            wc = wc_of(n, K=K, max_lod=3, W=W, tail=tail)
        except ValueError:
            continue  # the history does not fit this budget at all
        a = rng.randrange(n)
        span = (a, min(n, a + rng.randint(1, 3 * K)))
        before = wc.entries
        plan, protected = plan_oracle_layout(wc, [span], rest=rest)
        plan.validate()
        assert wc.entries == before, "the session's layout is not modified"
        assert plan.num_tokens == n and len(plan) <= W
        at_lod0 = lods_of(plan, *span) == {0}
        assert at_lod0 == (min_entries_for_lod0(wc, span) <= W), (K, W, n, tail, span, plan.entries)
        hits += at_lod0
        misses += not at_lod0
        assert all(lod > 0 for lod, _ in protected)
    assert hits > 50 and misses > 20  # both sides of the budget were exercised


def test_the_answer_comes_first_when_the_whole_needle_does_not_fit():
    wc = wc_of(1000, K=4, max_lod=3, W=40, tail=8)
    span, core = (500, 540), [(532, 535)]  # a 40-token needle; the answer at its end
    plan, _ = plan_oracle_layout(wc, [span], core=core)
    assert lods_of(plan, *core[0]) == {0}
    assert lods_of(plan, *span) != {0}, "this budget cannot hold the whole needle: the test needs a tight budget"
    plain, _ = plan_oracle_layout(wc, [span])  # without a core: the needle's start first, the end not reached
    assert lods_of(plain, 500, 504) == {0} and lods_of(plain, *core[0]) != {0}


def test_room_left_goes_to_the_needles_neighbours():
    wc = wc_of(600, K=4, max_lod=2, W=64, tail=8)
    plan, _ = plan_oracle_layout(wc, [(301, 303)])
    assert lods_of(plan, 296, 308) == {0}, "the blocks either side of the needle are read at full detail"
    assert len(plan) + plan.block_size - 1 > plan.max_entries, "the rest of the budget is spent"


def test_the_recent_plan_spends_the_rest_on_the_newest_history():
    """rest="recent": the needle as before, then raw tokens back from the tail until the budget refuses, the
    needle's neighbours left coarse; the rest is spent as fully as the neighbours' plan spends it."""
    wc = wc_of(600, K=4, max_lod=2, W=64, tail=8)
    plan, _ = plan_oracle_layout(wc, [(301, 303)], rest="recent")
    assert lods_of(plan, 300, 304) == {0} and lods_of(plan, 296, 300) != {0}, "the needle's block only"
    lod = plan.lod_map().tolist()
    raw_from = max(t for t in range(600) if lod[t] > 0) + 1  # the raw region before the end
    assert raw_from < 600 - 8, "raw tokens reach back past the recent tail"
    assert len(plan) + plan.block_size - 1 > plan.max_entries, "the rest of the budget is spent"
    with pytest.raises(ValueError, match="rest must be one of"):
        plan_oracle_layout(wc, [(301, 303)], rest="everywhere")


def test_the_graded_plan_refines_the_newest_coarsest_gists_and_opens_no_other_raw_token():
    """rest="graded": the needle as before, then the coarsest gists one level finer, newest first, until the
    budget refuses; no raw token beyond the needle's block and the recent tail."""
    wc = wc_of(600, K=4, max_lod=2, W=64, tail=8)  # 37 LOD2 gists + 8 raw tokens
    plan, _ = plan_oracle_layout(wc, [(301, 303)], rest="graded")
    lod = plan.lod_map().tolist()
    assert lods_of(plan, 300, 304) == {0} and lod.count(0) == 4 + 8, "the needle's block and the tail only"
    assert lods_of(plan, 528, 592) == {1}, "the four newest LOD2 gists were opened to LOD1"
    assert lods_of(plan, 0, 288) == {2} and lods_of(plan, 320, 528) == {2}, "older ones stay coarsest"
    assert len(plan) + plan.block_size - 1 > plan.max_entries, "the rest of the budget is spent"


def test_several_spans_and_the_question():
    wc = wc_of(800, K=4, max_lod=3, W=48, tail=8)
    plan, _ = plan_oracle_layout(wc, [(100, 104), (500, 504)], question=(790, 800))
    assert lods_of(plan, 100, 104) == {0} and lods_of(plan, 500, 504) == {0}


@pytest.mark.parametrize("spans, match", [([], "at least one"), ([(5, 5)], "non-empty"), ([(0, 10_000)], "inside"),
                                          (["ab"], "token range")])
def test_bad_spans_are_refused(spans, match):
    with pytest.raises(ValueError, match=match):
        plan_oracle_layout(wc_of(200), spans)


def test_the_oracle_layout_holds_while_the_session_decodes(tmp_path):
    """The needle's expansions carry cooldown marks: tokens appended after the refocus (the answer being
    written) make room elsewhere, and the needle stays at LOD0."""
    cfg = tiny_cfg()
    from mc.eval.evaluate import load_trained_controller
    ctrl = load_trained_controller(cfg, fake_run(tmp_path, cfg), device=torch.device("cpu"))
    ids = torch.randint(0, 256, (240,), generator=torch.Generator().manual_seed(5))
    s = ctrl.begin_session(ids)
    span = (40, 43)
    made = oracle_refocus(ctrl, span)
    assert made >= 2 and lods_of(s.wc, *span) == {0}
    assert len(s.wc) + s.wc.block_size - 1 > s.wc.max_entries, "the plan spends the budget"
    for t in range(6):
        ctrl.append(torch.tensor([t]), refocus=False)
        assert lods_of(s.wc, *span) == {0}, f"the needle was collapsed by the append of token {t}"
    s.wc.validate()
    with pytest.raises(ValueError, match="spans"):
        multi_span_oracle_refocus(ctrl, [])
