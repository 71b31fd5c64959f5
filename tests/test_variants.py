"""Variant sampler: baseline + random block-aligned compressions, valid, same size, deterministic."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from _wc_helpers import check_invariants, geometries  # shared (tests/_wc_helpers.py)
from mc.variants import sample_variants, variant_kinds
from mc.working_context import WorkingContext


@settings(max_examples=40, deadline=None)
@given(geo=geometries(), n_random=st.integers(0, 4), seed=st.integers(0, 2**31 - 1))
def test_variants_valid_same_size_deterministic(geo, n_random, seed):
    n, p = geo
    vs = sample_variants(n, n_random=n_random, generator=torch.Generator().manual_seed(seed), **p)
    again = sample_variants(n, n_random=n_random, generator=torch.Generator().manual_seed(seed), **p)
    assert vs == again  # deterministic per seed
    assert len(vs) == n_random + 1
    assert vs[0] == WorkingContext.build(n, fill=True, **p)  # recency baseline
    for v in vs:
        check_invariants(v)
        assert v.num_tokens == n
        assert v.lod_map()[max(0, n - p["recent_tokens"]):].eq(0).all()
        # Every layout is the coarsest one plus expansions, so the baseline's size is reachable.
        assert len(v) == len(vs[0])


def test_random_variants_differ_and_depend_on_seed():
    p = dict(block_size=4, max_lod=2, max_entries=60, recent_tokens=8)
    a = sample_variants(256, n_random=6, generator=torch.Generator().manual_seed(1), **p)
    b = sample_variants(256, n_random=6, generator=torch.Generator().manual_seed(2), **p)
    assert a[0] == b[0]
    assert a[1:] != b[1:]
    layouts = {tuple(v.entries) for v in a[1:]}
    assert len(layouts) > 1  # random, not a copy of one layout
    assert any(v != a[0] for v in a[1:])
    for v in a:
        assert len(v) == len(a[0])


def test_default_geometry_is_fast_and_full():
    # The stage-2 defaults: T=2048, K=32, max_lod=2, 256 entries, 64 recent tokens.
    p = dict(block_size=32, max_lod=2, max_entries=256, recent_tokens=64)
    vs = sample_variants(2048, n_random=3, generator=torch.Generator().manual_seed(0), **p)
    assert all(len(v) == len(vs[0]) > 256 - 31 for v in vs)


def test_errors():
    p = dict(block_size=2, max_lod=1, max_entries=4, recent_tokens=2)
    with pytest.raises(ValueError, match="generator"):
        sample_variants(8, n_random=1, generator=0, **p)
    with pytest.raises(ValueError, match="n_random"):
        sample_variants(8, n_random=-1, generator=torch.Generator(), **p)
    with pytest.raises(ValueError, match="coarsest layout"):
        sample_variants(100, n_random=1, generator=torch.Generator(), **p)


def test_training_signal_covers_every_level():
    """Multi-level refocus needs LensNet to learn about every level: over a few draws, random variants
    hold detail at every LOD below max_lod *inside* regions that are max_lod gists in the coarsest
    layout (expansions of expansions), and the per-entry preference targets reach entries of every
    LOD > 0 (the loss's lod-map comparison is level-agnostic)."""
    from mc.nets.losses import preference_loss  # noqa: PLC0415

    K, max_lod, n = 4, 3, 512
    p = dict(block_size=K, max_lod=max_lod, max_entries=60, recent_tokens=8)
    coarse = WorkingContext.build(n, fill=False, **p)
    top_region = {t for i, (lod, _) in enumerate(coarse.entries) if lod == max_lod
                  for t in range(*coarse.span(i))}
    seen_lods_in_top: set[int] = set()
    g = torch.Generator().manual_seed(0)
    vs = []
    for _ in range(8):
        vs = sample_variants(n, n_random=7, generator=g, **p)
        for v in vs[1:]:
            lod_map = v.lod_map()
            seen_lods_in_top |= {int(lod_map[t]) for t in top_region}
    assert seen_lods_in_top >= set(range(max_lod + 1)), seen_lods_in_top
    # Targets: scores of zero, a loss gap per pair: every LOD > 0 present gets a non-zero target somewhere.
    v = len(vs)
    w = max(len(x) for x in vs)
    lods = torch.full((1, v, w), 0, dtype=torch.long)
    pos = torch.zeros(1, v, w)
    mask = torch.zeros(1, v, w, dtype=torch.bool)
    for j, x in enumerate(vs):
        for i in range(len(x)):
            lo, hi = x.span(i)
            lods[0, j, i], pos[0, j, i], mask[0, j, i] = x.entries[i][0], (lo + hi - 1) / 2, True
    scores = torch.zeros(1, v, w, requires_grad=True)
    losses = torch.arange(v, dtype=torch.float32)[None]  # distinct losses: every pair carries a preference
    lod_map = torch.stack([x.lod_map() for x in vs])[None]
    res = preference_loss(scores, mask, pos, lods, lod_map, losses, block_size=K, beta=2.0, min_gap=0.0)
    res.loss.backward()
    got = {int(lods[0, j, i]) for j in range(v) for i in range(w)
           if mask[0, j, i] and scores.grad[0, j, i].abs() > 0 and lods[0, j, i] > 0}
    present = {int(l) for l in lods[mask].tolist() if l > 0}
    assert got == present and len(present) >= 2, (got, present)


@settings(max_examples=30, deadline=None)
# allow_subnormal=False: `import mc` flushes subnormal floats (mc/denormals.py), which Hypothesis refuses to draw then.
@given(geo=geometries(), seed=st.integers(0, 2**31 - 1), frac=st.floats(0.0, 0.95, allow_subnormal=False),
       n_guided=st.integers(0, 3))
def test_guided_variants_bring_the_focus_span_to_lod0_and_stay_valid(geo, seed, frac, n_guided):
    n, p = geo
    if n < 1:
        return  # an empty history has no span to focus
    start = int(frac * max(1, n - p["recent_tokens"] - 1))
    span = (start, min(n, start + 3))
    vs = sample_variants(n, n_random=3, generator=torch.Generator().manual_seed(seed), focus_span=span,
                         n_guided=n_guided, **p)
    again = sample_variants(n, n_random=3, generator=torch.Generator().manual_seed(seed), focus_span=span,
                            n_guided=n_guided, **p)
    assert vs == again and len(vs) == 4
    coarse = WorkingContext.build(n, fill=False, **p)
    path = sum(1 for i in range(len(coarse)) if coarse.span(i)[0] < span[1] and span[0] < coarse.span(i)[1])
    for k, v in enumerate(vs):
        check_invariants(v)
        assert len(v) == len(vs[0])
        # the first guided variant holds the span at LOD0 whenever the budget leaves room for the path
        room = (len(vs[0]) - len(coarse)) // (p["block_size"] - 1)
        if k == 1 and n_guided >= 1 and room >= p["max_lod"] * path + p["max_lod"]:
            assert v.lod_map()[span[0]:span[1]].eq(0).all(), (k, span)


def test_guided_variants_need_a_span_and_a_valid_one():
    p = dict(block_size=4, max_lod=3, max_entries=60, recent_tokens=8)
    g = torch.Generator().manual_seed(0)
    plain = sample_variants(512, n_random=3, generator=torch.Generator().manual_seed(0), **p)
    assert sample_variants(512, n_random=3, generator=g, n_guided=2, **p) == plain  # no span: all random
    for bad in ((5, 5), (-1, 3), (500, 600)):
        with pytest.raises(ValueError, match="focus_span"):
            sample_variants(512, n_random=3, generator=g, focus_span=bad, n_guided=1, **p)
    with pytest.raises(ValueError, match="n_guided"):
        sample_variants(512, n_random=3, generator=g, focus_span=(3, 9), n_guided=-1, **p)
    # random variants at 512 tokens almost never reach LOD0 over one record; the guided ones always do
    span = (100, 108)
    hits = [sum(bool(v.lod_map()[span[0]:span[1]].eq(0).all()) for v in
                sample_variants(512, n_random=3, generator=g, focus_span=span, n_guided=1, **p)[1:])
            for _ in range(20)]
    assert all(h >= 1 for h in hits)


def test_further_guided_variants_stop_at_intermediate_levels():
    """The path's intermediate gists must be entries of some variants, or LensNet never learns to
    rank them: over a few draws the later guided variants hold the span at every level above LOD0."""
    p = dict(block_size=4, max_lod=3, max_entries=60, recent_tokens=8)
    g, span, seen = torch.Generator().manual_seed(1), (100, 104), set()
    for _ in range(12):
        vs = sample_variants(512, n_random=4, generator=g, focus_span=span, n_guided=3, **p)
        assert vs[1].lod_map()[span[0]:span[1]].eq(0).all()  # the first guided variant: all the way down
        seen |= {int(v.lod_map()[span[0]:span[1]].max()) for v in vs[2:4]}
    assert {0, 1, 2} <= seen, seen


def test_more_guided_than_random_variants_is_capped():
    p = dict(block_size=4, max_lod=3, max_entries=60, recent_tokens=8)
    capped = sample_variants(512, n_random=2, generator=torch.Generator().manual_seed(0), focus_span=(100, 104),
                             n_guided=5, **p)
    exact = sample_variants(512, n_random=2, generator=torch.Generator().manual_seed(0), focus_span=(100, 104),
                            n_guided=2, **p)
    assert capped == exact and len(capped) == 3


def test_decoy_variants_expand_another_record_and_leave_the_queried_one_coarse():
    """Decoys (after the guided variants) expand a non-queried record's path: the first to LOD0, the
    others to a random level; the queried record stays coarse there unless a random expansion hits it."""
    p = dict(block_size=4, max_lod=3, max_entries=60, recent_tokens=8)
    focus, decoys = (100, 104), [(300, 304), (400, 404)]
    g, hit, levels = torch.Generator().manual_seed(3), set(), set()
    for _ in range(12):
        vs = sample_variants(512, n_random=4, generator=g, focus_span=focus, n_guided=1, decoy_spans=decoys,
                             n_decoy=2, **p)
        assert len(vs) == 5
        for v in vs:
            check_invariants(v)
            assert len(v) == len(vs[0])
        assert vs[1].lod_map()[focus[0]:focus[1]].eq(0).all()  # the guided variant comes first
        first = vs[2].lod_map()
        down = [d for d in decoys if first[d[0]:d[1]].eq(0).all()]
        assert down, "the first decoy variant must hold one of the decoy spans at LOD0"
        hit |= set(down)
        levels.add(int(min(vs[3].lod_map()[d[0]:d[1]].max() for d in decoys)))
    assert hit == set(decoys), hit  # the decoy record is drawn at random
    assert len(levels) >= 2, levels  # the further decoys stop at various levels


def test_decoys_change_nothing_without_decoy_spans_and_are_capped():
    p = dict(block_size=4, max_lod=3, max_entries=60, recent_tokens=8)

    def draw(**kw):
        return sample_variants(512, n_random=3, generator=torch.Generator().manual_seed(5), focus_span=(100, 104),
                               n_guided=1, **p, **kw)
    assert draw(n_decoy=2) == draw()  # no decoy spans (a one-record document): the same draws as before
    assert draw(decoy_spans=[(300, 304)], n_decoy=0) == draw()
    capped = draw(decoy_spans=[(300, 304)], n_decoy=9)  # 1 guided + 2 decoys fill the 3 random variants
    assert len(capped) == 4 and capped[2].lod_map()[300:304].eq(0).all()
    with pytest.raises(ValueError, match="decoy span"):
        draw(decoy_spans=[(600, 604)], n_decoy=1)
    with pytest.raises(ValueError, match="n_decoy"):
        draw(decoy_spans=[(300, 304)], n_decoy=-1)


def test_variant_kinds_name_the_layouts_in_the_samplers_order():
    assert variant_kinds(3) == ["baseline", "random", "random", "random"]
    assert variant_kinds(4, n_guided=1, n_decoy=2, has_focus=True, has_decoys=True) == [
        "baseline", "guided", "decoy", "decoy", "random"]
    assert variant_kinds(3, n_guided=2, n_decoy=5, has_focus=True, has_decoys=True) == [
        "baseline", "guided", "guided", "decoy"]  # capped as the sampler caps them
    assert variant_kinds(3, n_guided=2, n_decoy=1, has_decoys=True) == ["baseline", "decoy", "random", "random"]
    assert variant_kinds(3, n_guided=2, n_decoy=1, has_focus=True) == ["baseline", "guided", "guided", "random"]


def _reference_random_expansion(coarse, target, generator):
    """The sampler's random expansion as first written: the gist list re-read from the layout each time."""
    wc = coarse.copy()
    while len(wc) + wc.block_size - 1 <= target:
        gists = [i for i, lod in enumerate(wc.lods()) if lod > 0]
        if not gists:
            break
        wc.expand(gists[int(torch.randint(len(gists), (1,), generator=generator))])
    return wc


@pytest.mark.parametrize("geometry", [dict(block_size=4, max_lod=3, max_entries=40, recent_tokens=8),
                                      dict(block_size=32, max_lod=2, max_entries=512, recent_tokens=128),
                                      dict(block_size=8, max_lod=2, max_entries=64, recent_tokens=32)])
def test_incremental_gist_list_draws_the_same_layouts_as_the_reference(monkeypatch, geometry):
    """The kept-up-to-date gist list picks exactly the layouts the re-read list did, seed for seed (random,
    guided and decoy variants alike), so every run's training data is unchanged."""
    import mc.variants as variants_module

    top = geometry["block_size"] ** geometry["max_lod"]
    for seed in range(12):
        n = top * (2 + seed % 5) + seed * 3
        spans = dict(focus_span=(n // 3, n // 3 + 5), n_guided=1, decoy_spans=[(n // 2, n // 2 + 4)], n_decoy=1)
        for extra in ({}, spans):
            new = sample_variants(n, n_random=4, generator=torch.Generator().manual_seed(seed), **geometry, **extra)
            with monkeypatch.context() as m:
                m.setattr(variants_module, "_random_expansion", _reference_random_expansion)
                ref = sample_variants(n, n_random=4, generator=torch.Generator().manual_seed(seed), **geometry, **extra)
            assert [v.entries for v in new] == [v.entries for v in ref], (seed, extra)
            assert any(len(v) > len(new[0]) // 2 for v in new[1:])  # the expansions did run
