"""Working context: invariants under random edits, legality queries, build, materialise, gather."""
from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given, settings, strategies as st

from _wc_helpers import check_invariants, geometries  # shared (tests/_wc_helpers.py)
from mc.config import PAD_ID
from mc.tree import LifetimeGistTree, gist_levels
from mc.working_context import WCBuffer, WorkingContext, bucket_for, gather_batched, materialize


def try_edit(wc: WorkingContext, kind: str, i: int) -> bool:
    """Apply one edit; assert the legality query agrees with the raise and nothing changes on a refusal."""
    before = wc.copy()
    reason = wc.check_expand(i) if kind == "expand" else wc.check_collapse(i)
    try:
        getattr(wc, kind)(i)
    except ValueError as e:
        assert reason is not None and str(e) == reason
        assert wc == before, "a refused edit changed the working context"
        return False
    assert reason is None, f"{kind}({i}) succeeded although the query said: {reason}"
    K = wc.block_size
    lod, idx = before[i]
    if kind == "expand":
        assert len(wc) == len(before) + K - 1
        assert wc.entries[i : i + K] == [(lod - 1, idx * K + j) for j in range(K)]
    else:
        assert len(wc) == len(before) - K + 1
        assert wc[i] == (lod + 1, idx // K)
    return True


def _appended_entries(wc, k):
    """Entries an append of k tokens adds (independent count): tokens that stay in the new tail are
    LOD0; tokens pushed past it enter as the fewest aligned complete nodes of lod <= max_lod."""
    K, old, new = wc.block_size, wc.num_tokens, wc.num_tokens + k
    tail = max(old, new - wc.recent_tokens)
    count, pos = new - tail, old
    while pos < tail:
        w = max(K**lod for lod in range(wc.max_lod + 1) if pos % K**lod == 0 and pos + K**lod <= tail)
        count, pos = count + 1, pos + w
    return count


@settings(max_examples=40, deadline=None)
@given(geo=geometries(max_tokens=300, max_slack=60, max_recent=40), seed=st.integers(0, 2**31 - 1))
def test_random_edit_sequences_keep_invariants(geo, seed):
    n, params = geo
    rng = random.Random(seed)
    wc = WorkingContext.build(n, fill=rng.random() < 0.5, **params)
    check_invariants(wc)
    applied = refused = 0
    while applied + refused < 500:  # at least 500 expand/collapse attempts (plus streamed appends)
        r = rng.random()
        if r < 0.05:  # stream new tokens in
            k = rng.randint(0, wc.block_size + 1)
            before = wc.copy()
            added = _appended_entries(wc, k)
            if len(wc) + added <= wc.max_entries:
                wc.append_tokens(k)
                assert wc.num_tokens == before.num_tokens + k and len(wc) == len(before) + added
            else:
                with pytest.raises(ValueError, match="budget"):
                    wc.append_tokens(k)
                assert wc == before
        else:
            kind = "expand" if rng.random() < 0.5 else "collapse"
            if rng.random() < 0.5:
                i = rng.randint(-1, len(wc))  # anything, mostly illegal
            else:
                query = wc.check_expand if kind == "expand" else wc.check_collapse
                legal = [j for j in range(len(wc)) if query(j) is None]
                i = rng.choice(legal) if legal else rng.randint(0, max(0, len(wc) - 1))
            if try_edit(wc, kind, i):
                applied += 1
            else:
                refused += 1
        check_invariants(wc)
        wc.validate()
        # The allocator's one-pass scan names exactly the groups check_collapse allows.
        assert wc.collapsible() == [j for j in range(len(wc)) if wc.check_collapse(j) is None]


def make(entries, n, K=2, max_lod=2, max_entries=100, recent=2):
    return WorkingContext(entries, n, block_size=K, max_lod=max_lod, max_entries=max_entries, recent_tokens=recent)


def test_constructor_names_the_broken_invariant():
    ok = [(2, 0), (1, 2), (0, 6), (0, 7)]
    make(ok, 8)  # valid: [0,4) LOD2, [4,6) LOD1, tail 6,7
    with pytest.raises(ValueError, match=r"entry 1 .*tiling"):
        make([(2, 0), (1, 3), (0, 6), (0, 7)], 8)  # gap
    with pytest.raises(ValueError, match=r"entry 1 .*tiling"):
        make([(2, 0), (0, 3), (1, 2), (0, 6), (0, 7)], 8)  # overlap
    with pytest.raises(ValueError, match=r"entry 2 .*not complete"):
        make([(2, 0), (1, 2), (1, 3)], 7, recent=0)  # block [6, 8) but only 7 tokens
    with pytest.raises(ValueError, match=r"recent tail"):
        make([(2, 0), (1, 2), (1, 3)], 8)
    with pytest.raises(ValueError, match=r"lod must be in"):
        make([(3, 0)], 8, max_lod=2, recent=0)
    with pytest.raises(ValueError, match=r"budget"):
        make(ok, 8, max_entries=3)
    with pytest.raises(ValueError, match=r"tiling"):
        make(ok[:-1], 8)
    with pytest.raises(ValueError, match=r"\(lod, index\)"):
        make([(2, 0, 1)], 8)


def test_illegal_edits_raise_with_reason():
    wc = make([(2, 0), (1, 2), (0, 6), (0, 7)], 8, max_entries=5)
    assert "no children" in wc.check_expand(2)
    assert wc.check_expand(1) is None
    wc.max_entries = 4
    assert "budget" in wc.check_expand(0)  # 4 + 1 > 4
    wc.max_entries = 5
    assert "no such entry" in wc.check_expand(4)
    assert "max_lod" in wc.check_collapse(0)
    assert "expected sibling (1, 3)" in wc.check_collapse(1)  # (1, 2) is followed by a token, not (1, 3)
    with pytest.raises(ValueError, match="entry 2 .*no children"):
        wc.expand(2)
    wc.expand(1)  # -> (2,0), (0,4), (0,5), (0,6), (0,7)
    assert wc.entries == [(2, 0), (0, 4), (0, 5), (0, 6), (0, 7)]
    assert wc.check_collapse(1) is None
    assert "recent tail" in wc.check_collapse(3)
    assert "first child" in wc.check_collapse(2)
    wc.collapse(1)
    assert wc.entries == [(2, 0), (1, 2), (0, 6), (0, 7)]


def test_build_layouts():
    p = dict(block_size=4, max_lod=2, recent_tokens=8)
    coarse = WorkingContext.build(100, max_entries=50, fill=False, **p)
    # [0,16),[16,32),[32,48),[48,64),[64,80) LOD2; [80,84),[84,88),[88,92) LOD1; tail 92..99.
    assert coarse.entries == [(2, i) for i in range(5)] + [(1, i) for i in range(20, 23)] + [(0, t) for t in range(92, 100)]
    full = WorkingContext.build(100, max_entries=50, fill=True, **p)
    check_invariants(full)
    assert len(full) + 3 > 50  # no further expansion fits
    lods = full.lods()
    assert lods == sorted(lods, reverse=True)  # recency-graded: newer is never coarser
    with pytest.raises(ValueError, match="coarsest layout"):
        WorkingContext.build(100, max_entries=15, fill=False, **p)
    empty = WorkingContext.build(0, max_entries=5, **p)
    assert len(empty) == 0 and empty.lod_map().numel() == 0


def test_positions_widths_lod_map():
    wc = make([(2, 0), (1, 2), (0, 6), (0, 7)], 8)
    assert wc.starts() == [0, 4, 6, 7]
    assert wc.widths() == [4, 2, 1, 1]
    assert wc.positions() == [1.5, 4.5, 6.0, 7.0]  # centre; LOD0 = token index
    assert wc.lod_map().tolist() == [2, 2, 2, 2, 1, 1, 0, 0]
    assert wc.span(1) == (4, 6) and wc.tail_start() == 6


def test_bucket_for():
    assert bucket_for(1, [4, 8, 16]) == 4
    assert bucket_for(8, [4, 8, 16]) == 8
    assert bucket_for(9, [16, 4, 8]) == 16
    with pytest.raises(ValueError, match="no bucket"):
        bucket_for(17, [4, 8, 16])


def make_tree(n, K=4, max_lod=2, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    tree = LifetimeGistTree(K, max_lod, d, lambda b: b.mean(1), chunk_tokens=16)
    ids = torch.randint(0, 256, (n,), generator=g)
    tree.append(ids, torch.rand(n, d, generator=g) + 1)
    return tree


def test_materialize_buckets_mask_positions():
    K = 4
    tree = make_tree(90, K=K)
    buf = WCBuffer(64, 3, device="cpu")
    ptr = buf.embeds.data_ptr()
    ladder = [8, 16, 32, 64]
    big = WorkingContext.build(90, block_size=K, max_lod=2, max_entries=40, recent_tokens=10)
    m = materialize(big, tree, buf, ladder)
    assert m.length == len(big) and m.bucket == bucket_for(len(big), ladder) == 64 - 32 * (len(big) <= 32)
    small = WorkingContext.build(90, block_size=K, max_lod=2, max_entries=20, recent_tokens=10, fill=False)
    m = materialize(small, tree, buf, ladder)
    n = len(small)
    assert buf.embeds.data_ptr() == ptr and m.embeds.data_ptr() == ptr  # static addresses
    assert m.bucket == bucket_for(n, ladder) and m.embeds.shape == (m.bucket, 3)
    assert m.mask[:n].all() and not m.mask[n:].any()
    assert (m.embeds[n:] == 0).all()  # padding overwritten although the previous WC was longer
    assert m.positions[:n].tolist() == small.positions() and (m.positions[n:] == 0).all()
    assert m.lods[:n].tolist() == small.lods() and (m.lods[n:] == 0).all()
    for j, (lod, idx) in enumerate(small.entries):
        assert torch.equal(m.embeds[j], tree.level(lod)[idx])
        assert m.token_ids[j].item() == (tree.token_ids()[idx].item() if lod == 0 else PAD_ID)
    assert (m.token_ids[n:] == PAD_ID).all()
    with pytest.raises(ValueError, match="capacity"):
        materialize(big, tree, WCBuffer(16, 3, device="cpu"), ladder)
    with pytest.raises(ValueError, match="tokens"):
        materialize(small, make_tree(91, K=K), buf, ladder)


def test_gather_batched_matches_materialize_and_is_differentiable():
    K, max_lod, T, B, V = 2, 2, 16, 2, 3
    g = torch.Generator().manual_seed(3)
    embeds = (torch.rand(B, T, 3, generator=g) + 1).requires_grad_()
    ids = torch.randint(0, 256, (B, T), generator=g)
    levels = gist_levels(embeds, K, max_lod, lambda b: b.mean(1))
    rng = random.Random(0)
    wcs = []
    for r in range(B * V):
        wc = WorkingContext.build(T, block_size=K, max_lod=max_lod, max_entries=12, recent_tokens=3, fill=r % 2 == 0)
        for _ in range(10):
            legal = [j for j in range(len(wc)) if wc.check_expand(j) is None]
            if legal:
                wc.expand(rng.choice(legal))
        wcs.append(wc)
    out = gather_batched(levels, wcs, 16, token_ids=ids)
    assert out["embeds"].shape == (B * V, 16, 3)
    buf = WCBuffer(16, 3, device="cpu")
    for r, wc in enumerate(wcs):
        b = r // V
        tree = LifetimeGistTree(K, max_lod, 3, lambda x: x.mean(1))
        tree.append(ids[b], embeds[b].detach())
        m = materialize(wc, tree, buf, [16])
        assert torch.allclose(out["embeds"][r], m.embeds, atol=1e-6)
        assert torch.equal(out["mask"][r], m.mask)
        assert torch.equal(out["positions"][r], m.positions)
        assert torch.equal(out["lods"][r], m.lods)
        assert torch.equal(out["token_ids"][r], m.token_ids)
        assert out["lengths"][r].item() == len(wc)
    out["embeds"].sum().backward()
    assert embeds.grad is not None and embeds.grad.abs().sum() > 0
    assert gather_batched(levels, wcs, 16)["token_ids"] is None
    with pytest.raises(ValueError, match="bucket"):
        gather_batched(levels, wcs, 4)
    with pytest.raises(ValueError, match="multiple"):
        gather_batched(levels, wcs[:5], 16)
