"""Branched refocus (``allocator.inference.branches``): LensNet's zoom plus the next-ranked gists' zooms,
the layout kept is the one under which the base best predicts the newest tokens. Tiny random nets on
CPU (eager)."""
from __future__ import annotations

import pytest
import torch

from _tiny_config import SCENARIO, TINY
from mc.build import build_controller
from mc.config import ConfigError
from mc.config_loading import load_config
from mc.refocus import lookahead_fit, zoom

# Three levels over a 600-token prompt: several gists to choose from, paths of more than one expansion.
OVERRIDES = TINY + SCENARIO + ["mc.max_lod=2", "allocator.expand_top=1", "allocator.trade_margin_z=0.0",
                               "allocator.inference.iterations=4", "allocator.inference.max_edits=2",
                               "allocator.inference.edit_budget=6",
                               "allocator.inference.branch_tail_tokens=4", "allocator.inference.branch_margin=0"]


def _controller(branches: int, seed: int = 0, margin: float = 0.0):
    torch.manual_seed(seed)
    return build_controller(load_config(OVERRIDES + [f"allocator.inference.branches={branches}",
                                                     f"allocator.inference.branch_margin={margin}"]),
                            device=torch.device("cpu"))


def _prompt(seed: int, n: int = 600) -> torch.Tensor:
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed))


def _fit(ctrl) -> float:  # log-likelihood of the newest 4 tokens, computed here by hand
    s = ctrl.session
    mwc = s.materialize()
    logp = torch.log_softmax(ctrl.base_logits(mwc.embeds[None], mwc.positions[None], mwc.lods[None], mwc.mask[None])[0], -1)
    ids = s.history()
    return sum(float(logp[mwc.length - 1 - j - 1, ids[-1 - j]]) for j in range(4))


def test_one_branch_is_lensnets_zoom_alone():
    ctrl = _controller(1)
    ctrl.begin_session(_prompt(0))
    rec = ctrl.refocus()
    assert rec.branch == 0 and rec.branch_fits == [] and rec.edits


@pytest.mark.parametrize("seed", range(4))
def test_branches_keep_the_most_confident_layout(seed):
    plain, branched = _controller(1, seed), _controller(3, seed)  # same weights: same seed
    plain.begin_session(_prompt(seed))
    branched.begin_session(_prompt(seed))
    plain.refocus()
    rec = branched.refocus()
    s = branched.session
    s.wc.validate()
    assert len(rec.branch_fits) == 3  # LensNet's zoom and two more
    assert rec.branch == rec.branch_fits.index(max(rec.branch_fits))  # margin 0: the best fit
    # The kept layout is the one that confidence was measured on, and its edits are that path's.
    assert _fit(branched) == pytest.approx(max(rec.branch_fits), abs=1e-4)
    assert 0 < len(rec.edits) <= 6
    if rec.branch != 0:  # another path won, strictly, and its layout differs from LensNet's own
        assert rec.branch_fits[rec.branch] > rec.branch_fits[0]
        assert s.wc.entries != plain.session.wc.entries
    assert len(s.refocus_log) == 1 and s.tokens_since_refocus == 0


@pytest.mark.parametrize("margin, fits, kept", [
    (0.0, [0.5, 0.5, 0.5], 0), (0.0, [0.1, 0.3, 0.2], 1), (0.0, [0.1, 0.2, 0.3], 2),
    (8.0, [-9.0, -1.5, -1.2], 0),  # better, but not by the margin: LensNet's path stays
    (8.0, [-9.0, 0.0, -3.0], 1), (8.0, [-9.0, -0.5, 0.0], 2),  # past the margin, the best of the others
    (8.0, [-9.0, -0.95, -0.9], 2), (8.0, [-9.0, -1.0, -2.0], 0)])  # among the others no margin: the better fit wins
def test_the_choice_follows_the_tail_fit_with_a_margin_for_lensnets_path(monkeypatch, margin, fits, kept):
    plain, branched = _controller(1), _controller(3, margin=margin)
    plain.begin_session(_prompt(5))
    branched.begin_session(_prompt(5))
    lens_only = plain.refocus()
    layouts, seq = [], iter(fits)

    def fake_fit():  # records the layout each branch ended on
        layouts.append(list(branched.session.wc.entries))
        return next(seq)

    monkeypatch.setattr(branched, "_tail_fit", fake_fit)
    rec = branched.refocus()
    assert rec.branch_fits == fits and rec.branch == kept
    assert branched.session.wc.entries == layouts[kept]
    assert layouts[0] == plain.session.wc.entries  # branch 0 is exactly a one-branch refocus
    assert len({tuple(x) for x in layouts}) == 3  # three different paths
    if kept == 0:
        assert [(e.kind, e.entry) for e in rec.edits] == [(e.kind, e.entry) for e in lens_only.edits]


def test_a_branch_zooms_its_own_gist():
    """Branch k expands the gist LensNet ranked k-th first (its span ends at a finer LOD than before)."""
    ctrl = _controller(2)
    ctrl.begin_session(_prompt(1))
    s = ctrl.session
    start = s.wc.copy()
    scores = ctrl._lensnet_allocator_scores(s.materialize(), s.num_tokens)[: len(start)].tolist()
    gists = sorted((i for i in range(len(start)) if start[i][0] > 0), key=lambda i: -scores[i])
    second = start.span(gists[1])
    branch, _ = zoom(s, ctrl.session_scores, focus_span=second)
    first_expand = next(e for e in branch.edits if e.kind == "expand")  # a trade's collapse may come first
    assert first_expand.entry == start[gists[1]]
    finest = min(s.wc[i][0] for i in range(len(s.wc)) if s.wc.overlap_mask(*second)[i] > 0)
    assert finest < start[gists[1]][0]


@pytest.mark.parametrize("bad", [0, -1])
def test_branches_must_be_positive(bad):
    with pytest.raises(ConfigError, match="allocator.inference.branches"):
        load_config(OVERRIDES + [f"allocator.inference.branches={bad}"])


@pytest.mark.parametrize("bad", [0, 8, 9])  # TINY's recent tail is 8 tokens
def test_branch_tail_must_lie_in_the_lod0_tail(bad):
    with pytest.raises(ConfigError, match="allocator.inference.branch_tail_tokens"):
        load_config(OVERRIDES + ["allocator.inference.branches=2", f"allocator.inference.branch_tail_tokens={bad}"])


def test_branch_margin_is_nats_at_least_zero():
    with pytest.raises(ConfigError, match="allocator.inference.branch_margin"):
        load_config(OVERRIDES + ["allocator.inference.branch_margin=-1"])


@pytest.mark.parametrize("start_fit, fits, kept", [
    (-0.5, [-9.0, -9.5, -9.9], 3),  # the unchanged layout fits by more than the margin (8): no edit
    (-1.5, [-9.0, -9.5, -9.9], 0),  # better than LensNet's path, not by the margin
    (-2.0, [-9.0, -0.5, -9.9], 1),  # another zoom fits better still
    (-0.5, [-9.0, -0.5, -9.9], 1)])  # a tie keeps the zoom
def test_the_unchanged_layout_is_the_last_candidate(monkeypatch, start_fit, fits, kept):
    ctrl = build_controller(load_config(OVERRIDES + ["allocator.inference.branches=3", "allocator.inference.branch_margin=8",
                                                     "allocator.inference.branch_unchanged=true"]),
                            device=torch.device("cpu"))
    ctrl.begin_session(_prompt(5))
    start = list(ctrl.session.wc.entries)
    layouts, seq = [], iter([start_fit, *fits])  # the unchanged layout is fitted first, before any zoom

    def fake_fit():
        layouts.append(list(ctrl.session.wc.entries))
        return next(seq)

    monkeypatch.setattr(ctrl, "_tail_fit", fake_fit)
    rec = ctrl.refocus()
    assert layouts[0] == start and rec.branch_fits == [*fits, start_fit] and rec.branch == kept
    ctrl.session.wc.validate()
    if kept == 3:
        assert ctrl.session.wc.entries == start and rec.edits == [] and rec.iterations == 0
    else:
        assert ctrl.session.wc.entries == layouts[1 + kept] != start and rec.edits
    assert len(ctrl.session.refocus_log) == 1 and ctrl.session.tokens_since_refocus == 0
    monkeypatch.undo()
    assert ctrl.refocus().edits  # nothing of the discarded zooms' cooldown marks blocks the next refocus


@pytest.mark.parametrize("extra, match", [
    (["allocator.inference.branches=1", "allocator.inference.branch_unchanged=true"], "needs allocator.inference.branches"),
    (["allocator.inference.branches=2", "allocator.inference.branch_unchanged=maybe"], "branch_unchanged")])
def test_branch_unchanged_needs_branches_and_a_bool(extra, match):
    with pytest.raises(ConfigError, match=match):
        load_config(OVERRIDES + extra)


def _lookahead_controller(n: int):
    torch.manual_seed(0)
    return build_controller(load_config(OVERRIDES + ["allocator.inference.branches=3",
                                                     f"allocator.inference.branch_lookahead={n}"]),
                            device=torch.device("cpu"))


def test_lookahead_fit_is_the_greedy_continuations_log_likelihood_and_leaves_the_session_as_it_was():
    ctrl = _lookahead_controller(5)
    s = ctrl.begin_session(_prompt(3, n=597))  # 3 tokens short of a block boundary: the lookahead completes a block
    before = (s.history().clone(), list(s.wc.entries), s.tokens_since_refocus, s.tree.mark())
    got = lookahead_fit(s, ctrl.next_token_logits, lambda ids: ctrl._extend(ids, False), 5)
    assert torch.equal(s.history(), before[0]) and s.wc.entries == before[1]
    assert s.tokens_since_refocus == before[2] and s.tree.mark() == before[3]
    want = 0.0  # the same continuation, appended for real
    for _ in range(5):
        logp = torch.log_softmax(ctrl.next_token_logits().float(), -1)
        want += float(logp.max())
        ctrl.append(logp.argmax().view(1), refocus=False)
    assert got == pytest.approx(want, abs=1e-4) and got < 0
    assert lookahead_fit(s, ctrl.next_token_logits, lambda ids: None, 0) == 0.0


def test_the_tail_fit_hands_its_last_logits_to_the_lookahead_and_never_appends_the_last_token(monkeypatch):
    ctrl = _lookahead_controller(3)
    s = ctrl.begin_session(_prompt(5))
    forwards, appended = [], []
    real_logits, real_extend = ctrl.base_logits, ctrl._extend
    monkeypatch.setattr(ctrl, "base_logits", lambda *a, **k: forwards.append(1) or real_logits(*a, **k))
    monkeypatch.setattr(ctrl, "_extend", lambda ids, refocus: appended.append(int(ids[0])) or real_extend(ids, refocus))
    fit = ctrl._tail_fit()
    assert len(forwards) == 3  # the tail's forward also opens the lookahead; then one per appended token
    assert len(appended) == 2  # the third token's log-probability needs no append
    monkeypatch.setattr(ctrl, "base_logits", real_logits)
    by_hand = _fit(ctrl) + lookahead_fit(s, ctrl.next_token_logits, lambda ids: real_extend(ids, False), 3)
    assert fit == pytest.approx(by_hand, abs=1e-4)


def test_lookahead_fit_restores_the_session_when_a_step_fails():
    ctrl = _lookahead_controller(3)
    s = ctrl.begin_session(_prompt(4))
    before = (s.history().clone(), list(s.wc.entries))
    calls = []

    def failing_logits():
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("boom")
        return ctrl.next_token_logits()

    with pytest.raises(RuntimeError, match="boom"):
        lookahead_fit(s, failing_logits, lambda ids: ctrl._extend(ids, False), 3)
    assert torch.equal(s.history(), before[0]) and s.wc.entries == before[1]


def _spy_fits(ctrl, monkeypatch, n: int) -> list[tuple[float, float]]:
    """Record, for every path a refocus fits, (the controller's fit, the same fit by hand: tail + continuation)."""
    seen, real = [], ctrl._tail_fit

    def spy():
        fit = real()
        ahead = lookahead_fit(ctrl.session, ctrl.next_token_logits, lambda ids: ctrl._extend(ids, False), n)
        seen.append((fit, _fit(ctrl) + ahead))
        return fit

    monkeypatch.setattr(ctrl, "_tail_fit", spy)
    return seen


def test_with_lookahead_each_path_is_fitted_on_its_tail_and_its_continuation(monkeypatch):
    ctrl = _lookahead_controller(3)
    ctrl.begin_session(_prompt(6))
    n_tokens = ctrl.session.num_tokens
    seen = _spy_fits(ctrl, monkeypatch, 3)
    rec = ctrl.refocus()
    assert len(seen) == len(rec.branch_fits) == 3
    for fit, by_hand in seen:
        assert fit == pytest.approx(by_hand, abs=1e-4)
    assert rec.branch == rec.branch_fits.index(max(rec.branch_fits))  # margin 0: the best fit
    assert ctrl.session.num_tokens == n_tokens  # no lookahead token stayed in the history
    ctrl.session.wc.validate()


@pytest.mark.parametrize("extra, match", [
    (["allocator.inference.branches=1", "allocator.inference.branch_lookahead=3"], "needs allocator.inference.branches"),
    (["allocator.inference.branches=2", "allocator.inference.branch_lookahead=-1"], "branch_lookahead"),
    (["allocator.inference.branches=2", "allocator.inference.branch_lookahead=true"], "branch_lookahead"),
    (["allocator.inference.branches=1", "allocator.inference.branch_max_tokens=512"], "needs allocator.inference.branches"),
    (["allocator.inference.branches=3", "allocator.inference.branch_max_tokens=-1"], "branch_max_tokens"),
    (["allocator.inference.branches=3", "allocator.inference.branch_max_tokens=1.5"], "branch_max_tokens")])
def test_branch_lookahead_and_max_tokens_are_checked(extra, match):
    with pytest.raises(ConfigError, match=match):
        load_config(OVERRIDES + extra)


def test_lookahead_reads_through_a_real_model_adapter(tmp_path, monkeypatch):
    """model=hf (a tiny random Llama through the adapter, as SmolLM2 is read): each path's fit counts its tail and
    its continuation, nothing stays in the history, and greedy decoding with the KV cache equals the cache-free path
    with the lookahead on (the refocus reverts its own appends, so the cache must follow the restored layout)."""
    pytest.importorskip("transformers", reason="model=hf needs the hf extra (scripts/setup_env.sh installs it)")
    from _hf_models import tiny_hf_dir  # noqa: PLC0415 - needs transformers

    d = tiny_hf_dir(tmp_path, "llama", 0.25)
    torch.manual_seed(0)
    ctrl = build_controller(load_config(["preset=smoke", "model=hf", f"model.hf_path={d}", "train.device=cpu",
                                         "allocator.inference.branches=3", "allocator.inference.branch_margin=0",
                                         "allocator.inference.branch_tail_tokens=4",
                                         "allocator.inference.branch_lookahead=3"]), device=torch.device("cpu"))
    prompt = torch.randint(3, ctrl.cfg.model.vocab_size, (300,), generator=torch.Generator().manual_seed(1))
    ctrl.begin_session(prompt)
    assert len(ctrl.session.wc) < 300  # the layout holds gists, so the branches have something to zoom
    seen = _spy_fits(ctrl, monkeypatch, 3)
    rec = ctrl.refocus()
    monkeypatch.undo()
    assert len(seen) == len(rec.branch_fits) >= 3 and all(f == pytest.approx(h, abs=1e-3) for f, h in seen)
    assert torch.equal(ctrl.session.history(), prompt)
    ctrl.session.wc.validate()
    outs = []
    for use_cache in (True, False):
        ctrl.begin_session(prompt)
        outs.append(ctrl.generate(40, use_cache=use_cache))
        assert len(ctrl.session.refocus_log) >= 1 and len(ctrl.session.refocus_log[-1].branch_fits) >= 3
    assert torch.equal(outs[0], outs[1])


def _short_branching(max_tokens: int, unchanged: bool = False):
    torch.manual_seed(0)
    return build_controller(load_config(OVERRIDES + ["allocator.inference.branches=3",
                                                     f"allocator.inference.branch_max_tokens={max_tokens}",
                                                     f"allocator.inference.branch_unchanged={str(unchanged).lower()}"]),
                            device=torch.device("cpu"))


def test_only_short_histories_branch(monkeypatch):
    """branch_max_tokens: a session up to that length branches as before; past it the refocus is LensNet's zoom
    alone, the very layout and edits a one-branch controller with the same weights makes."""
    short = _short_branching(600)  # the 600-token prompt is not longer: it branches
    short.begin_session(_prompt(2))
    assert len(short.refocus().branch_fits) == 3
    plain, long_ = _controller(1), _short_branching(599)
    plain.begin_session(_prompt(2))
    long_.begin_session(_prompt(2))
    monkeypatch.setattr(long_, "_tail_fit", lambda: pytest.fail("a session past branch_max_tokens measured a fit"))
    rec, own = long_.refocus(), plain.refocus()
    assert rec.branch == 0 and rec.branch_fits == [] and rec.edits
    assert long_.session.wc.entries == plain.session.wc.entries
    assert [(e.kind, e.entry) for e in rec.edits] == [(e.kind, e.entry) for e in own.edits]


@pytest.mark.parametrize("fits, kept", [([-3.0, -5.0], 0), ([-5.0, -3.0], 1), ([-4.0, -4.0], 0)])
def test_past_branch_max_tokens_the_unchanged_layout_still_competes(monkeypatch, fits, kept):
    """With branch_unchanged, a long session weighs LensNet's zoom against no edit (ties keep the zoom), and
    zooms no other path."""
    plain, ctrl = _controller(1), _short_branching(599, unchanged=True)
    plain.begin_session(_prompt(4))
    ctrl.begin_session(_prompt(4))
    start, seq = list(ctrl.session.wc.entries), iter([fits[1], fits[0]])  # the start's fit is measured first
    monkeypatch.setattr(ctrl, "_tail_fit", lambda: next(seq))
    rec, own = ctrl.refocus(), plain.refocus()
    assert rec.branch_fits == fits and rec.branch == kept
    if kept == 0:
        assert ctrl.session.wc.entries == plain.session.wc.entries and len(rec.edits) == len(own.edits) > 0
    else:
        assert ctrl.session.wc.entries == start and rec.edits == []
