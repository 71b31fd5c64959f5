"""Stage-2 objectives: shared-tail loss and the vectorised preference loss."""
import pytest
import torch
import torch.nn.functional as F

from mc.nets.losses import (FOCUS_SCALE, entry_spans, focus_loss, gist_content_loss, pair_indices, preference_loss,
                             shared_tail_loss, span_token_presence, tail_loss_mask,
                             tail_positions, tail_token_loss)


def test_tail_mask_marks_only_shared_targets():
    m = tail_loss_mask(torch.tensor([6, 4]), width=8, recent_tokens=3)
    assert m[0].tolist() == [False] * 4 + [True, True, False, False]
    assert m[1].tolist() == [False, False, True, True] + [False] * 4


def test_shared_tail_loss_matches_hand_computation():
    torch.manual_seed(0)
    r, w, v = 2, 7, 11
    logits = torch.randn(r, w, v)
    ids = torch.randint(0, v, (r, w))
    lengths = torch.tensor([7, 5])
    got = shared_tail_loss(logits, ids, lengths, recent_tokens=3)
    for row in range(r):
        n = int(lengths[row])
        terms = [F.cross_entropy(logits[row, j - 1][None], ids[row, j][None]) for j in range(n - 2, n)]
        assert torch.allclose(got[row], torch.stack(terms).mean(), atol=1e-6)


def test_tail_loss_from_the_tail_logits_alone_equals_the_full_one():
    """The step computes logits only at tail_positions; tail_token_loss over them is shared_tail_loss over all."""
    gen = torch.Generator().manual_seed(4)
    lengths = torch.tensor([9, 6, 12, 7])
    logits = torch.randn(4, 12, 11, generator=gen)
    ids = torch.randint(0, 11, (4, 12), generator=gen)
    at = tail_positions(lengths, 4)
    assert at.tolist()[1] == [2, 3, 4]  # row 1 (6 entries): entries 2..4 predict entries 3..5
    tail = logits.gather(1, at.unsqueeze(-1).expand(-1, -1, 11))
    assert torch.allclose(tail_token_loss(tail, ids, at), shared_tail_loss(logits, ids, lengths, 4), atol=1e-6)
    with pytest.raises(ValueError, match="do not agree"):
        tail_token_loss(tail[:, :2], ids, at)
    with pytest.raises(ValueError, match="recent_tokens >= 2"):
        tail_positions(lengths, 1)


def test_the_base_computes_logits_at_the_given_positions_only():
    from mc.nets.gpt import GPT  # noqa: PLC0415
    from mc.config import ModelConfig  # noqa: PLC0415

    torch.manual_seed(0)
    gpt = GPT(ModelConfig(vocab_size=40, d_model=16, n_layers=1, n_heads=2, max_seq_len=32)).eval()
    embeds = torch.randn(2, 10, 16)
    at = torch.tensor([[3, 4, 9], [0, 5, 6]])
    with torch.no_grad():
        full, part = gpt(embeds=embeds), gpt(embeds=embeds, logit_index=at)
    assert part.shape == (2, 3, 40)
    assert torch.allclose(part, full.gather(1, at.unsqueeze(-1).expand(-1, -1, 40)), atol=1e-6)
    with pytest.raises(ValueError, match="logit_index must be a long tensor"):
        gpt(embeds=embeds, logit_index=at[:1])


def test_shared_tail_loss_ignores_gist_and_padding_positions():
    torch.manual_seed(1)
    logits = torch.randn(1, 8, 5)
    ids = torch.randint(0, 5, (1, 8))
    base = shared_tail_loss(logits, ids, torch.tensor([6]), recent_tokens=3)
    ids2, logits2 = ids.clone(), logits.clone()
    ids2[0, :4] = 0  # before the tail targets
    ids2[0, 6:] = 1  # padding
    logits2[0, :3] = 100.0  # positions whose predictions are not counted
    logits2[0, 6:] = -3.0
    assert torch.allclose(base, shared_tail_loss(logits2, ids2, torch.tensor([6]), recent_tokens=3))


def test_entry_spans_from_centre_positions():
    lods = torch.tensor([2, 1, 0])
    positions = torch.tensor([1.5, 4.5, 6.0])  # K=2: [0,4), [4,6), [6,7)
    start, width = entry_spans(positions, lods, block_size=2)
    assert start.tolist() == [0, 4, 6] and width.tolist() == [4, 2, 1]


def _two_variant_batch():
    # K=2, T=4. Variant 0: four LOD0 tokens. Variant 1: one LOD1 gist [0,2) then two LOD0 tokens.
    mask = torch.tensor([[[1, 1, 1, 1], [1, 1, 1, 0]]], dtype=torch.bool)
    positions = torch.tensor([[[0.0, 1, 2, 3], [0.5, 2, 3, 0]]])
    lods = torch.tensor([[[0, 0, 0, 0], [1, 0, 0, 0]]])
    lod_map = torch.tensor([[[0, 0, 0, 0], [1, 1, 0, 0]]])
    return mask, positions, lods, lod_map


def test_preference_targets_point_towards_the_better_variant():
    mask, positions, lods, lod_map = _two_variant_batch()
    for losses, sign in ((torch.tensor([[1.0, 2.0]]), 1.0), (torch.tensor([[2.0, 1.0]]), -1.0)):
        scores = torch.zeros(1, 2, 4, requires_grad=True)
        res = preference_loss(scores, mask, positions, lods, lod_map, losses, block_size=2, beta=4.0, min_gap=1e-3)
        res.loss.backward()
        g = scores.grad
        # Entries over [0,2) in both variants carry the preference; [2,4) is equal in both, no signal.
        active = torch.tensor([[[1, 1, 0, 0], [1, 0, 0, 0]]], dtype=torch.bool)
        assert (g[active] * sign < 0).all(), "gradient descent must move scores towards the preferred detail"
        assert (g[~active] == 0).all()
        assert res.active_entries.item() == 3 and res.active_pairs.item() == 1


def test_no_preference_below_min_gap_and_accuracy():
    mask, positions, lods, lod_map = _two_variant_batch()
    scores = torch.tensor([[[0.5, 0.5, 0.0, 0.0], [0.5, 0.0, 0.0, 0.0]]], requires_grad=True)
    res = preference_loss(scores, mask, positions, lods, lod_map, torch.tensor([[1.0, 1.0001]]),
                          block_size=2, beta=4.0, min_gap=1e-3)
    assert res.loss.item() == 0.0 and res.active_entries.item() == 0
    res = preference_loss(scores, mask, positions, lods, lod_map, torch.tensor([[1.0, 2.0]]),
                          block_size=2, beta=4.0, min_gap=1e-3)
    assert res.accuracy.item() == 1.0


def test_pairs_and_batching_are_consistent():
    i, j = pair_indices(4)
    assert list(zip(i.tolist(), j.tolist())) == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    mask, positions, lods, lod_map = _two_variant_batch()
    scores = torch.randn(1, 2, 4)
    one = preference_loss(scores, mask, positions, lods, lod_map, torch.tensor([[1.0, 2.0]]),
                          block_size=2, beta=4.0, min_gap=0.0)
    two = preference_loss(scores.repeat(2, 1, 1), mask.repeat(2, 1, 1), positions.repeat(2, 1, 1),
                          lods.repeat(2, 1, 1), lod_map.repeat(2, 1, 1), torch.tensor([[1.0, 2.0]] * 2),
                          block_size=2, beta=4.0, min_gap=0.0)
    assert torch.allclose(one.loss, two.loss)


def test_excluded_variants_take_part_in_no_pair():
    """exclude_bv (decoy layouts): the loss, accuracy and counts equal those of the batch without that variant."""
    torch.manual_seed(3)
    mask, positions, lods, lod_map = _two_variant_batch()
    third = (mask[:, 1:], positions[:, 1:], lods[:, 1:], torch.tensor([[[0, 0, 1, 1]]]))
    mask3, pos3, lods3 = (torch.cat([a, b[:, :1].clone()], 1) for a, b in zip((mask, positions, lods), third))
    lods3[0, 2] = torch.tensor([0, 0, 1, 0])
    pos3[0, 2] = torch.tensor([0.0, 1, 2.5, 0])
    map3 = torch.cat([lod_map, third[3]], 1)
    scores3 = torch.randn(1, 3, 4)
    losses3 = torch.tensor([[1.0, 2.0, 5.0]])  # the third has by far the largest gap: it would outweigh the pair
    kw = dict(block_size=2, beta=4.0, min_gap=1e-3)
    excl = torch.tensor([[False, False, True]])
    got = preference_loss(scores3, mask3, pos3, lods3, map3, losses3, exclude_bv=excl, **kw)
    ref = preference_loss(scores3[:, :2], mask, positions, lods, lod_map, losses3[:, :2], **kw)
    for f in ("loss", "accuracy", "active_entries", "active_pairs"):
        assert torch.allclose(getattr(got, f), getattr(ref, f)), f
    full = preference_loss(scores3, mask3, pos3, lods3, map3, losses3, **kw)
    assert full.active_pairs.item() == 3 and not torch.allclose(full.loss, ref.loss)


def test_focus_loss_ranks_the_gist_over_the_span_first_and_ignores_corpus_rows():
    """K=4: entries [LOD1 0-3][LOD1 4-7][LOD1 8-11][LOD0 12][LOD0 13][pad]; the record at tokens 5..6."""
    k = 4
    pos = torch.tensor([[[1.5, 5.5, 9.5, 12.0, 13.0, 0.0]]])
    lods = torch.tensor([[[1, 1, 1, 0, 0, 0]]])
    mask = torch.tensor([[[True, True, True, True, True, False]]])
    span = torch.tensor([[5, 7]])
    scores = torch.zeros(1, 1, 6, requires_grad=True)
    loss = focus_loss(scores, mask, pos, lods, span, block_size=k)
    assert abs(float(loss.detach()) - torch.log(torch.tensor(3.0))) < 1e-6  # uniform over 3 gists, 1 target
    loss.backward()
    g = scores.grad[0, 0]
    assert g[1] < 0 and g[0] > 0 and g[2] > 0  # descent raises the record's gist, lowers the other gists
    assert g[3] == 0 and g[4] == 0 and g[5] == 0  # tokens and padding are not ranked
    best = torch.tensor([[[-1.0, 1.0, -1.0, 0.0, 0.0, 0.0]]])
    assert float(focus_loss(best, mask, pos, lods, span, block_size=k)) < 2 * torch.exp(torch.tensor(-2 * FOCUS_SCALE))
    corpus = torch.tensor([[-1, -1]])
    s2 = torch.zeros(1, 1, 6, requires_grad=True)
    out = focus_loss(s2, mask, pos, lods, corpus, block_size=k)
    assert float(out.detach()) == 0.0
    out.backward()
    assert (s2.grad == 0).all()
    # the record at LOD0 (no gist over it): nothing to rank either
    assert float(focus_loss(scores.detach(), mask, pos, lods, torch.tensor([[12, 14]]), block_size=k)) == 0.0
    with pytest.raises(ValueError, match="span"):
        focus_loss(scores, mask, pos, lods, torch.tensor([5, 7]), block_size=k)


def test_span_token_presence_marks_exactly_the_tokens_under_each_gist():
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 12, (2, 32), generator=gen)
    lv1, lv2 = span_token_presence(ids, 12, block_size=4, max_lod=2)
    assert lv1.shape == (2, 8, 12) and lv2.shape == (2, 2, 12)
    for b in range(2):
        for i in range(8):
            assert set(lv1[b, i].nonzero().flatten().tolist()) == set(ids[b, 4 * i:4 * i + 4].tolist())
        for i in range(2):
            assert set(lv2[b, i].nonzero().flatten().tolist()) == set(ids[b, 16 * i:16 * i + 16].tolist())


def test_gist_content_loss_is_low_for_gists_that_encode_their_tokens_and_trains_head_and_gists():
    gen = torch.Generator().manual_seed(0)
    vocab, k = 10, 2
    ids = torch.randint(0, vocab, (3, 8), generator=gen)
    lv1, lv2 = span_token_presence(ids, vocab, k, 2)
    head = torch.nn.Linear(vocab, vocab)
    with torch.no_grad():
        head.weight.copy_(torch.eye(vocab) * 20.0)
        head.bias.fill_(-10.0)
    # Gists that are their own presence vectors: the identity head reads them perfectly (logit +-10).
    perfect = gist_content_loss([lv1.float(), lv2.float()], ids, head, k)
    blank = gist_content_loss([torch.zeros_like(lv1, dtype=torch.float), torch.zeros_like(lv2, dtype=torch.float)],
                              ids, head, k)
    assert perfect < 1e-3 < 1.0 < blank
    g1 = torch.randn(3, 4, vocab, generator=gen).requires_grad_()
    g2 = torch.randn(3, 2, vocab, generator=gen).requires_grad_()
    gist_content_loss([g1, g2], ids, head, k).backward()
    assert g1.grad.abs().sum() > 0 and g2.grad.abs().sum() > 0 and head.weight.grad.abs().sum() > 0
