"""Lifetime gist tree: chunked appends == one-go build, one gist call per level, chunked storage."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from mc.tree import LifetimeGistTree, gist_levels


def mean_gist(blocks):  # [N, K, D] -> [N, D]
    return blocks.mean(dim=1)


class CountingGist:
    """Mean pooling that records the number of blocks of every call."""

    def __init__(self):
        self.calls: list[int] = []

    def __call__(self, blocks):
        self.calls.append(blocks.shape[0])
        return blocks.mean(dim=1)


def history(n, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 256, (n,), generator=g)
    embeds = torch.rand(n, d, generator=g, dtype=torch.float64).float() + 1.0  # not zero-mean: a zero gist is a bug
    return ids, embeds


def maxabs(a, b):
    return (a - b).abs().max().item() if a.numel() else 0.0


def reference_levels(embeds, K, max_lod):
    """Independent reference: level L node i = mean of its K**L tokens (mean pooling composes)."""
    out = [embeds]
    for lod in range(1, max_lod + 1):
        n = embeds.shape[0] // K**lod
        out.append(embeds[: n * K**lod].reshape(n, K**lod, embeds.shape[1]).mean(dim=1))
    return out


@settings(max_examples=40, deadline=None)
@given(K=st.integers(2, 5), max_lod=st.integers(0, 3), n=st.integers(0, 700), seed=st.integers(0, 10_000),
       data=st.data())
def test_chunked_append_matches_one_go(K, max_lod, n, seed, data):
    ids, embeds = history(n, seed=seed)
    one = LifetimeGistTree(K, max_lod, 3, mean_gist, chunk_tokens=8)
    one.append(ids, embeds)
    # Chunk sizes mix 1 token, exactly one block, one top-level block and many blocks at once.
    choices = st.sampled_from([1, K, K**max_lod, 3 * K**max_lod + 1, K + 1, 7])
    chunked = LifetimeGistTree(K, max_lod, 3, mean_gist, chunk_tokens=8)
    pos = 0
    while pos < n:
        step = min(data.draw(choices), n - pos)
        chunked.append(ids[pos : pos + step], embeds[pos : pos + step])
        pos += step
    ref = reference_levels(embeds, K, max_lod)
    assert chunked.num_tokens == one.num_tokens == n
    assert torch.equal(chunked.token_ids(), ids)
    for lod in range(max_lod + 1):
        assert chunked.num_nodes(lod) == one.num_nodes(lod) == n // K**lod
        assert maxabs(chunked.level(lod), one.level(lod)) <= 1e-6
        assert maxabs(chunked.level(lod), ref[lod]) <= 1e-5
        assert (chunked.level(lod).abs().sum(dim=-1) > 0).all(), f"zero gist at lod {lod}"


@settings(max_examples=30, deadline=None)
@given(K=st.integers(2, 4), max_lod=st.integers(1, 3), sizes=st.lists(st.integers(0, 90), min_size=1, max_size=12))
def test_one_gist_call_per_level_per_append(K, max_lod, sizes):
    fn = CountingGist()
    tree = LifetimeGistTree(K, max_lod, 3, fn, chunk_tokens=4)
    ids, embeds = history(sum(sizes))
    pos = 0
    for n in sizes:
        before = [tree.num_nodes(lod) for lod in range(max_lod + 1)]
        fn.calls.clear()
        new = tree.append(ids[pos : pos + n], embeds[pos : pos + n])
        pos += n
        gained = [lod for lod in range(1, max_lod + 1) if tree.num_nodes(lod) > before[lod]]
        assert len(fn.calls) == len(gained)  # exactly one batched call per level that gained nodes
        assert fn.calls == [tree.num_nodes(lod) - before[lod] for lod in gained]
        assert new == {lod: tree.num_nodes(lod) - before[lod] for lod in range(1, max_lod + 1)}


def test_many_blocks_at_once_is_one_call_per_level():
    fn = CountingGist()
    K, max_lod = 4, 3
    tree = LifetimeGistTree(K, max_lod, 3, fn)
    ids, embeds = history(5 * K**max_lod)
    assert tree.append(ids, embeds) == {1: 5 * K**2, 2: 5 * K, 3: 5}
    assert fn.calls == [5 * K**2, 5 * K, 5]


def test_storage_grows_by_doubling_not_per_token():
    K = 2
    tree = LifetimeGistTree(K, 2, 3, mean_gist, chunk_tokens=16)
    ids, embeds = history(100)
    ptrs = set()
    caps = []
    for t in range(100):
        tree.append(ids[t : t + 1], embeds[t : t + 1])
        ptrs.add(tree.level(0).data_ptr())
        caps.append(tree.capacity(0))
    assert sorted(set(caps)) == [16, 32, 64, 128]  # capacity doubles
    assert len(ptrs) == 4  # one reallocation per doubling, not one per token
    assert tree.capacity(1) >= tree.num_nodes(1) and tree.capacity(2) >= tree.num_nodes(2)
    ref = reference_levels(embeds, K, 2)
    for lod in range(3):
        assert torch.allclose(tree.level(lod), ref[lod], atol=1e-6)


@settings(max_examples=30, deadline=None)
@given(K=st.integers(2, 4), max_lod=st.integers(0, 3), B=st.integers(1, 3), mult=st.integers(1, 3),
       seed=st.integers(0, 1000))
def test_gist_levels_equals_tree_levels(K, max_lod, B, mult, seed):
    T = mult * K**max_lod
    seqs = [history(T, seed=seed + b) for b in range(B)]
    fn = CountingGist()
    levels = gist_levels(torch.stack([e for _, e in seqs]), K, max_lod, fn)
    assert len(fn.calls) == max_lod  # one call per level
    assert fn.calls == [B * T // K**lod for lod in range(1, max_lod + 1)]
    for b, (ids, embeds) in enumerate(seqs):
        tree = LifetimeGistTree(K, max_lod, 3, mean_gist)
        tree.append(ids[: T // 2], embeds[: T // 2])
        tree.append(ids[T // 2 :], embeds[T // 2 :])
        for lod in range(max_lod + 1):
            assert levels[lod].shape == (B, T // K**lod, 3)
            assert (levels[lod][b] - tree.level(lod)).abs().max() <= 1e-6


def test_gist_levels_is_differentiable():
    K, max_lod = 2, 2
    x = (torch.rand(2, 8, 3) + 1).requires_grad_()
    w = torch.nn.Parameter(torch.ones(3))
    levels = gist_levels(x, K, max_lod, lambda b: b.mean(1) * w)
    levels[2].sum().backward()
    assert x.grad is not None and (x.grad != 0).all()
    assert w.grad is not None and (w.grad != 0).all()


def test_node_span_and_errors():
    tree = LifetimeGistTree(4, 2, 3, mean_gist)
    ids, embeds = history(40)
    tree.append(ids, embeds)
    assert tree.node_span(0, 5) == (5, 6)
    assert tree.node_span(1, 9) == (36, 40)
    assert tree.node_span(2, 1) == (16, 32)
    with pytest.raises(ValueError, match="does not exist"):
        tree.node_span(2, 2)  # block [32, 48) is incomplete
    with pytest.raises(ValueError, match="lod"):
        tree.level(3)
    with pytest.raises(ValueError, match=r"\[n, D\]"):
        tree.append(ids[:3], embeds[:2])
    with pytest.raises(ValueError, match="1-D"):
        tree.append(ids[:4].reshape(2, 2), embeds[:4])
    bad = LifetimeGistTree(2, 1, 3, lambda b: b.sum(1)[:, :2])
    with pytest.raises(ValueError, match="gist_fn returned"):
        bad.append(ids[:2], embeds[:2])
    with pytest.raises(ValueError, match="multiple"):
        gist_levels(torch.rand(1, 6, 3), 2, 2, mean_gist)
    with pytest.raises(ValueError, match="block_size"):
        LifetimeGistTree(1, 2, 3, mean_gist)


def test_append_does_not_keep_autograd_history():
    w = torch.nn.Parameter(torch.ones(3))
    tree = LifetimeGistTree(2, 1, 3, lambda b: b.mean(1) * w)
    ids, embeds = history(4)
    tree.append(ids, embeds.requires_grad_())
    assert not tree.level(1).requires_grad and not tree.level(0).requires_grad
