"""Inference sessions of any length: atomic appends, levels that grow, monotonic capacity.

The session is driven directly (``InferenceSession.extend`` + the allocator) with mean-pool gists,
so these tests exercise the data model at 100k-1M tokens in seconds; the controller's own use of
it (GistNet, LensNet) is covered in tests/test_mc_components.py.
"""
from __future__ import annotations

import dataclasses
import random

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _tiny_config import TINY
from _wc_helpers import check_invariants
from mc.config import RunConfig
from mc.config_loading import load_config
from mc.session import InferenceSession
from mc.working_context import capacity_tokens, coarsest_size, layout_depth


def mean_pool(blocks):  # [N, K, D] -> [N, D]
    return blocks.mean(1)


def embeds_for(ids: torch.Tensor, dim: int) -> torch.Tensor:
    """Deterministic per-token embeddings (so gists differ and rollback equality means something)."""
    g = ids.to(torch.float32)[:, None]
    return torch.sin(g * torch.arange(1, dim + 1, dtype=torch.float32) / 7.0)  # [n, D]


def with_mc(cfg: RunConfig, **mc) -> RunConfig:
    return dataclasses.replace(cfg, mc=dataclasses.replace(cfg.mc, **mc))


@pytest.fixture(scope="module")
def tiny() -> RunConfig:
    return load_config(TINY)


def new_session(cfg: RunConfig, gist_fn=mean_pool) -> InferenceSession:
    return InferenceSession(cfg, gist_fn, dim=cfg.model.d_model, device=torch.device("cpu"))


def stream(s: InferenceSession, n: int) -> None:
    start = s.num_tokens
    ids = torch.arange(start, start + n) % 250
    s.extend(ids, embeds_for(ids, s.tree.dim))


def check_session(s: InferenceSession) -> None:
    """Every invariant, and tree and working context agree on length, depth and every node."""
    wc, tree = s.wc, s.tree
    check_invariants(wc)
    wc.validate()
    assert wc.num_tokens == tree.num_tokens
    assert wc.max_lod == tree.max_lod
    for lod in range(tree.max_lod + 1):
        assert tree.level(lod).shape[0] == tree.num_tokens // tree.block_size**lod
    for lod, idx in wc.entries:
        assert idx < tree.level(lod).shape[0], f"entry {(lod, idx)} is not a node of the tree"


def session_state(s: InferenceSession):
    tree = s.tree
    return (tree.num_tokens, tree.max_lod, [tree.level(l).clone() for l in range(tree.max_lod + 1)],
            tree.token_ids().clone(), None if s.wc is None else (list(s.wc.entries), s.wc.num_tokens, s.wc.max_lod),
            dict(s.allocator._expanded_into), dict(s.allocator._collapsed_into), s.allocator.clock,
            s.tokens_since_refocus)


def assert_same_state(a, b) -> None:
    assert a[:2] == b[:2]
    assert len(a[2]) == len(b[2]) and all(torch.equal(x, y) for x, y in zip(a[2], b[2]))
    assert torch.equal(a[3], b[3])
    assert a[4:] == b[4:]


def test_streaming_one_token_at_a_time_goes_far_past_the_old_limit(tiny):
    """Used to die at 312 tokens on this config (make_room ran against the tail before the append)."""
    s = new_session(tiny)
    stream(s, 1)
    for _ in range(2000):
        stream(s, 1)
        check_session(s)
    assert s.num_tokens == 2001 and s.tree.max_lod > tiny.mc.max_lod  # the tree grew a level on the way


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1))
def test_random_streams_and_refocuses_keep_every_invariant(tiny, seed):
    """Chunks of 1..5,000 tokens up to 100k tokens, refocus at random moments with random scores."""
    rng = random.Random(seed)
    s = new_session(tiny)
    while s.num_tokens < 100_000:
        stream(s, rng.randint(1, 5000) if rng.random() < 0.5 else rng.randint(1, 40))
        check_session(s)
        if rng.random() < 0.4:
            scores = torch.rand(len(s.wc), generator=torch.Generator().manual_seed(rng.randint(0, 10**6))) * 2 - 1
            s.allocator.step(s.wc, scores, max_edits=rng.randint(1, 6))
            s.allocator.end_refocus()
            check_session(s)


def test_a_failed_append_leaves_the_session_exactly_as_it_was(tiny):
    calls = {"n": 0, "fail_at": None}

    def flaky(blocks):
        calls["n"] += 1
        if calls["fail_at"] is not None and calls["n"] >= calls["fail_at"]:
            raise RuntimeError("gist function failed")
        return mean_pool(blocks)

    s = new_session(tiny, flaky)
    stream(s, 50)
    for _ in range(30):  # some history, refocus marks and a grown level
        stream(s, 7)
        s.allocator.step(s.wc, torch.linspace(1, -1, len(s.wc)), max_edits=2)
        s.allocator.end_refocus()
    s.allocator.step(s.wc, torch.linspace(-1, 1, len(s.wc)), max_edits=3)  # fresh cooldown marks
    completes_one_block = tiny.mc.block_size - s.num_tokens % tiny.mc.block_size
    for n, fail_afters in ((completes_one_block, (0,)), (64, (0, 1)), (3000, (0, 1))):
        for fail_after in fail_afters:  # fail in the first, or a later, gist call of the append
            before = session_state(s)
            calls["fail_at"] = calls["n"] + 1 + fail_after
            with pytest.raises(RuntimeError, match="gist function failed"):
                stream(s, n)
            assert_same_state(session_state(s), before)
            calls["fail_at"] = None
            check_session(s)
    stream(s, 100)  # and the session still works
    check_session(s)


def test_restore_returns_to_the_snapshot_however_often_and_whatever_happened_since(tiny):
    """The evaluation reads one document with several focus policies from one snapshot of the built session:
    every restore must give back exactly that state (tree, layout, allocator marks, clock, log), even after
    appends that grew a level and refocuses that edited the layout."""
    s = new_session(tiny)
    stream(s, 300)
    s.allocator.step(s.wc, torch.linspace(1, -1, len(s.wc)), max_edits=2)
    s.refocus_log.append("earlier refocus")
    snap, before = s.snapshot(), session_state(s)
    for chunk in (3, 5000, 40):  # 5000 tokens grow the tree a level past the snapshot's depth
        stream(s, chunk)
        s.allocator.step(s.wc, torch.linspace(-1, 1, len(s.wc)), max_edits=4)
        s.allocator.end_refocus()
        s.refocus_log.append("later refocus")
        s.restore(snap)
        assert_same_state(session_state(s), before)
        assert s.refocus_log == ["earlier refocus"]
        check_session(s)
    stream(s, 64)  # and the restored session streams on as one that never left the snapshot
    fresh = new_session(tiny)
    stream(fresh, 300)
    fresh.allocator.step(fresh.wc, torch.linspace(1, -1, len(fresh.wc)), max_edits=2)
    stream(fresh, 64)
    assert_same_state(session_state(s), session_state(fresh))


def test_accepted_prompt_lengths_are_exactly_one_to_capacity():
    """Capacity is monotonic in length: a tiny budget accepts every prompt of 1..capacity tokens and
    refuses longer ones with a message that names the capacity; streaming stops at the same point."""
    base = load_config(TINY)
    cfg = with_mc(base, block_size=2, max_lod=1, max_entries=6, recent_tokens=2, bucket_ladder=[8],
                  history_tokens=2)
    cap = capacity_tokens(block_size=2, max_entries=6, recent_tokens=2)
    assert cap == 32
    accepted = []
    for n in range(1, cap + 6):
        s = new_session(cfg)
        try:
            stream(s, n)
        except ValueError as e:
            assert f"up to {cap} tokens" in str(e) and "mc.max_entries" in str(e)
            assert s.wc is None and s.num_tokens == 0  # nothing half-done
            continue
        check_session(s)
        accepted.append(n)
    assert accepted == list(range(1, cap + 1))
    s = new_session(cfg)
    for _ in range(cap):
        stream(s, 1)
    before = session_state(s)
    with pytest.raises(ValueError, match=f"up to {cap} tokens"):
        stream(s, 1)
    assert_same_state(session_state(s), before)


def test_layout_arithmetic_matches_a_brute_force_cover():
    for K in (2, 3, 8):
        for lod in (1, 2, 3):
            for recent in (0, 3, 16):
                for n in list(range(0, 300, 7)) + [K**lod * 5 + recent]:
                    tail = max(0, n - recent)
                    count, pos = n - tail, 0
                    while pos < tail:  # greedy aligned cover, independent of mc.working_context
                        w = max(K**l for l in range(lod + 1) if pos % K**l == 0 and pos + K**l <= tail)
                        count, pos = count + 1, pos + w
                    assert coarsest_size(n, block_size=K, max_lod=lod, recent_tokens=recent) == count
    # layout_depth is the smallest sufficient depth
    for n in (10, 100, 1000, 10_000):
        d = layout_depth(n, block_size=4, min_lod=1, max_entries=32, recent_tokens=8)
        assert coarsest_size(n, block_size=4, max_lod=d, recent_tokens=8) <= 32
        assert d == 1 or coarsest_size(n, block_size=4, max_lod=d - 1, recent_tokens=8) > 32


def test_focus_room_adds_a_level_only_where_it_frees_entries():
    """layout_depth(room=R): the fitting depth, then deeper while the coarsest layout leaves < R free and the top
    level has K nodes to merge; brute force over depths, and room=0 is the depth that merely fits."""
    K, E, recent = 4, 32, 8
    for n in list(range(1, 3000, 37)) + [5000, 20_000]:
        fit = layout_depth(n, block_size=K, min_lod=1, max_entries=E, recent_tokens=recent)
        assert layout_depth(n, block_size=K, min_lod=1, max_entries=E, recent_tokens=recent, room=0) == fit
        for room in (1, 8, 15, 24):
            d = layout_depth(n, block_size=K, min_lod=1, max_entries=E, recent_tokens=recent, room=room)
            size = [coarsest_size(n, block_size=K, max_lod=lod, recent_tokens=recent) for lod in range(d + 2)]
            assert d >= fit
            for lod in range(fit, d):  # every level added freed entries and was needed
                assert size[lod] > E - room and size[lod + 1] < size[lod]
            assert size[d] <= E - room or size[d + 1] == size[d]  # stopped: room reached or nothing left to merge
    # the long_corpus geometry at 64x the base window: 44 of 72 entries at depth 3, 37 at depth 4
    kw = dict(block_size=8, min_lod=3, max_entries=72, recent_tokens=16)
    assert [layout_depth(8192, **kw, room=r) for r in (0, 28, 29, 35, 56)] == [3, 3, 4, 4, 4]
    assert [layout_depth(4096, **kw, room=r) for r in (0, 56)] == [3, 3]  # 4080 tokens before the tail: no L4 node


def test_a_session_with_focus_room_grows_a_level_early(tiny):
    """With mc.focus_room the session grows tree and working context together when the room runs short, streamed
    or in one prompt, and every invariant holds; without it the same history stays at the trained depth."""
    base = dict(block_size=8, max_lod=3, max_entries=72, recent_tokens=16, bucket_ladder=[40, 72], history_tokens=512)
    plain, roomy = new_session(with_mc(tiny, **base)), new_session(with_mc(tiny, **base, focus_room=32))
    streamed = new_session(with_mc(tiny, **base, focus_room=32))
    stream(plain, 8192)
    stream(roomy, 8192)
    for _ in range(8):
        stream(streamed, 1024)
    for s in (plain, roomy, streamed):
        check_session(s)
    assert plain.tree.max_lod == 3 and roomy.tree.max_lod == 4 and streamed.tree.max_lod == 4
    assert (4, 0) in roomy.wc.entries and (4, 0) in streamed.wc.entries  # the oldest 4096 tokens in one gist


def test_a_million_tokens_at_the_cpu_preset_geometry(tiny):
    """begin + stream to 1,000,000 tokens at the cpu preset's geometry (K=8, 72 entries, 16-token tail)."""
    cfg = with_mc(tiny, block_size=8, max_lod=1, max_entries=72, recent_tokens=16, bucket_ladder=[40, 72],
                  history_tokens=128)
    s = new_session(cfg)
    stream(s, 200)
    for i in range(20):
        stream(s, 49_980)
        if i % 5 == 0:
            s.allocator.step(s.wc, torch.rand(len(s.wc), generator=torch.Generator().manual_seed(i)) * 2 - 1, max_edits=4)
            s.allocator.end_refocus()
        check_session(s)
    for _ in range(200):  # then one token at a time
        stream(s, 1)
    check_session(s)
    assert s.num_tokens == 1_000_000
    assert s.tree.max_lod == layout_depth(1_000_000, block_size=8, min_lod=1, max_entries=72, recent_tokens=16)


def test_single_token_appends_keep_every_invariant(tiny):
    """Decode-style appends (one token at a time) skip the O(W) validate walk: the invariants must hold by
    construction, through the budget filling, collapses, level growth and refocus edits in between."""
    from mc.allocator import FocusAllocator  # noqa: PLC0415

    s = new_session(tiny)
    stream(s, 5)
    g = torch.Generator().manual_seed(3)
    for step in range(1200):  # past several level growths of the tiny budget (32 entries, K=4)
        stream(s, 1)
        check_session(s)
        if step % 16 == 15:  # a refocus with random scores moves the layout away from make_room's own
            alloc: FocusAllocator = s.allocator
            scores = torch.rand(len(s.wc), generator=g) * 2 - 1
            alloc.apply(s.wc, alloc.select(s.wc, scores, max_edits=3))
            alloc.end_refocus()
            check_session(s)
    assert s.tree.max_lod > tiny.mc.max_lod  # the stream went past the trained depth, growing levels
