"""Tests for mc/nets/gpt.py: the base GPT's two input paths, masking, and the next-token loss."""
import math

import pytest
import torch

from mc.config import PAD_ID, ModelConfig
from mc.nets.gpt import GPT, next_token_loss
from mc.nets.positional import lod_rotary_cos_sin, rotary_cos_sin


def tiny_cfg(**kw):
    base = dict(vocab_size=50, d_model=32, n_layers=2, n_heads=4, max_seq_len=64, qk_norm=True)
    base.update(kw)
    return ModelConfig(**base)


def make_model(seed=0, **kw):
    torch.manual_seed(seed)
    return GPT(tiny_cfg(**kw)).eval()


def rand_ids(b, t, seed=0, vocab=50):
    return torch.randint(0, vocab, (b, t), generator=torch.Generator().manual_seed(seed))


def test_shapes_and_head_dim():
    m = make_model()
    assert m.head_dim == 8
    ids = rand_ids(2, 10)
    assert m(ids).shape == (2, 10, 50)
    assert m.embed(ids).shape == (2, 10, 32)


def test_loss_matches_manual_loop():
    m = make_model()
    ids = rand_ids(2, 12, seed=3)
    logits = m(ids)
    got = next_token_loss(logits, ids, torch.ones(2, 12, dtype=torch.bool))
    total, n = 0.0, 0
    for b in range(2):
        for i in range(11):  # position i predicts token i+1
            row = logits[b, i].double()
            lse = math.log(sum(math.exp(v) for v in row.tolist()))
            total += lse - row[ids[b, i + 1]].item()
            n += 1
    assert abs(got.item() - total / n) < 1e-5
    # loss_mask=None means "all targets"
    assert torch.allclose(next_token_loss(logits, ids), got)


def test_loss_mask_semantics_and_reductions():
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(3, 6, 7, generator=g)
    targets = torch.randint(0, 7, (3, 6), generator=g)
    mask = torch.tensor([[True, True, False, True, False, True],
                         [False, False, False, False, False, False],
                         [False, True, True, True, True, True]])
    none = next_token_loss(logits, targets, mask, reduction="none")
    assert none.shape == (3, 5)
    logp = torch.log_softmax(logits, -1)
    for b in range(3):
        for i in range(5):
            want = -logp[b, i, targets[b, i + 1]].item() if mask[b, i + 1] else 0.0
            assert abs(none[b, i].item() - want) < 1e-5
    counts = mask[:, 1:].sum(1)
    per_row = next_token_loss(logits, targets, mask, reduction="per_row")
    assert per_row.shape == (3,)
    assert per_row[1].item() == 0.0 and torch.isfinite(per_row).all()
    assert torch.allclose(per_row[0], none[0].sum() / counts[0])
    mean = next_token_loss(logits, targets, mask, reduction="mean")
    assert torch.allclose(mean, none.sum() / counts.sum())
    # loss_mask[:, 0] is ignored: nothing predicts position 0
    mask0 = mask.clone()
    mask0[:, 0] = ~mask0[:, 0]
    assert torch.equal(next_token_loss(logits, targets, mask0, reduction="none"), none)
    # nothing unmasked -> 0, not NaN
    empty = torch.zeros_like(mask)
    assert next_token_loss(logits, targets, empty).item() == 0.0


def test_masked_positions_contribute_nothing():
    m = make_model()
    ids = rand_ids(2, 12, seed=5)
    logits = m(ids)
    mask = torch.ones(2, 12, dtype=torch.bool)
    mask[:, 3:7] = False
    base = next_token_loss(logits, ids, mask)
    changed_t = ids.clone()
    changed_t[:, 3:7] = torch.tensor([PAD_ID, 1000, -100, 7])  # any value, even out of range
    logits2 = logits.clone()
    logits2[:, 2:6] = float("nan")  # the logits predicting masked targets (positions 2..5)
    for red in ("mean", "none", "per_row"):
        a = next_token_loss(logits, ids, mask, reduction=red)
        b = next_token_loss(logits2, changed_t, mask, reduction=red)
        assert torch.equal(a, b), red
    assert torch.equal(next_token_loss(logits2, changed_t, mask), base)


@pytest.mark.parametrize("qk_norm", [True, False])
def test_embeds_path_equals_token_path(qk_norm):
    m = make_model(qk_norm=qk_norm)
    ids = rand_ids(2, 16, seed=6)
    a = m(ids)
    cos, sin = rotary_cos_sin(torch.arange(16).float(), m.head_dim, m.cfg.rope_base)
    b = m(embeds=m.embed(ids), cos=cos.expand(2, 16, -1), sin=sin.expand(2, 16, -1),
          key_padding_mask=torch.ones(2, 16, dtype=torch.bool))
    assert (a - b).abs().max().item() < 1e-5
    lods = torch.zeros(2, 16, dtype=torch.long)
    c2, s2 = lod_rotary_cos_sin(torch.arange(16).float().expand(2, 16), lods, 4, m.head_dim, m.cfg.rope_base)
    c = m(embeds=m.embed(ids), cos=c2, sin=s2)
    assert (a - c).abs().max().item() < 1e-5


def test_token_path_beyond_rope_table():
    m = make_model(max_seq_len=8)
    ids = rand_ids(1, 12, seed=7)
    a = m(ids)
    cos, sin = rotary_cos_sin(torch.arange(12), m.head_dim, m.cfg.rope_base)
    b = m(embeds=m.embed(ids), cos=cos, sin=sin)
    assert torch.allclose(a, b, atol=1e-6)


def test_key_padding_appended_entries_do_not_change_real_logits():
    m = make_model()
    ids = rand_ids(2, 10, seed=8)
    cos, sin = lod_rotary_cos_sin(torch.arange(10).float().expand(2, 10), torch.zeros(2, 10, dtype=torch.long),
                                  4, m.head_dim, m.cfg.rope_base)
    ref = m(embeds=m.embed(ids), cos=cos, sin=sin, key_padding_mask=torch.ones(2, 10, dtype=torch.bool))
    # pad to 16 with garbage embeddings and garbage positions; row 1 also pads inside its real length
    g = torch.Generator().manual_seed(9)
    emb = torch.cat([m.embed(ids), 5 * torch.randn(2, 6, 32, generator=g)], 1)
    cos_p = torch.cat([cos, torch.randn(2, 6, cos.shape[-1], generator=g)], 1)
    sin_p = torch.cat([sin, torch.randn(2, 6, sin.shape[-1], generator=g)], 1)
    kpm = torch.zeros(2, 16, dtype=torch.bool)
    kpm[:, :10] = True
    out = m(embeds=emb, cos=cos_p, sin=sin_p, key_padding_mask=kpm)
    assert (out[:, :10] - ref).abs().max().item() < 1e-5
    assert torch.isfinite(out).all()
    # a shorter row: row 1 has only 7 real entries; its first 7 logits equal an unpadded run
    kpm2 = kpm.clone()
    kpm2[1, 7:] = False
    out2 = m(embeds=emb, cos=cos_p, sin=sin_p, key_padding_mask=kpm2)
    ref7 = m(embeds=m.embed(ids[1:, :7]), cos=cos[1:, :7], sin=sin[1:, :7])
    assert (out2[1, :7] - ref7[0]).abs().max().item() < 1e-5
    assert (out2[0, :10] - ref[0]).abs().max().item() < 1e-5


def test_padding_keys_in_the_middle_are_ignored():
    m = make_model()
    ids = rand_ids(1, 8, seed=10)
    emb = m.embed(ids)
    cos, sin = rotary_cos_sin(torch.arange(8).float(), m.head_dim, m.cfg.rope_base)
    kpm = torch.ones(1, 8, dtype=torch.bool)
    kpm[0, 3] = False
    a = m(embeds=emb, cos=cos, sin=sin, key_padding_mask=kpm)
    emb2 = emb.clone()
    emb2[0, 3] = 100.0
    b = m(embeds=emb2, cos=cos, sin=sin, key_padding_mask=kpm)
    keep = torch.tensor([0, 1, 2, 4, 5, 6, 7])
    assert (a[0, keep] - b[0, keep]).abs().max().item() < 1e-5


def test_causality():
    m = make_model()
    ids = rand_ids(2, 12, seed=11)
    a = m(ids)
    ids2 = ids.clone()
    ids2[:, 8] = (ids2[:, 8] + 1) % 50
    b = m(ids2)
    assert torch.allclose(a[:, :8], b[:, :8], atol=1e-6)
    assert not torch.allclose(a[:, 8:], b[:, 8:])
    # the padded-mask kernel is causal too
    kpm = torch.ones(2, 12, dtype=torch.bool)
    c = m(ids, key_padding_mask=kpm)
    d = m(ids2, key_padding_mask=kpm)
    assert torch.allclose(c[:, :8], d[:, :8], atol=1e-6)


def test_no_nan_with_padding_rows_and_gradients_flow():
    m = make_model().train()
    ids = rand_ids(2, 10, seed=12)
    emb = m.embed(ids).detach().requires_grad_(True)
    kpm = torch.ones(2, 10, dtype=torch.bool)
    kpm[0, 6:] = False
    kpm[1, 0] = False  # a padding row at the start too: its query may attend only itself
    cos, sin = rotary_cos_sin(torch.arange(10).float(), m.head_dim, m.cfg.rope_base)
    out = m(embeds=emb, cos=cos, sin=sin, key_padding_mask=kpm)
    assert torch.isfinite(out).all()
    loss_mask = kpm.clone()
    loss_mask[:, 1:] &= kpm[:, :-1]  # predicting position must be real too
    loss = next_token_loss(out, ids, loss_mask)
    loss.backward()
    assert torch.isfinite(emb.grad).all() and emb.grad.abs().sum() > 0
    # padded entries receive no gradient (nothing real attends to them, their loss is masked)
    assert emb.grad[0, 6:].abs().max().item() == 0.0
    # token-path training step: every parameter gets a finite, non-zero gradient
    m.zero_grad(set_to_none=True)
    next_token_loss(m(ids), ids).backward()
    for name, p in m.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


def test_init_is_small_and_loss_near_uniform():
    m = make_model(vocab_size=50)
    ids = rand_ids(4, 32, seed=13)
    loss = next_token_loss(m(ids), ids).item()
    assert abs(loss - math.log(50)) < 0.2
    assert m.lm_head.weight is not m.tok_emb.weight  # untied head
    resid = m.blocks[0].attn.proj.weight.std().item()
    assert resid < m.blocks[0].attn.qkv.weight.std().item()


def test_forward_does_not_mutate_state():
    m = make_model()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    attrs = dict(vars(m))
    m(rand_ids(1, 5))
    assert vars(m).keys() == attrs.keys()
    for k, v in m.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_bad_inputs_raise():
    m = make_model()
    ids = rand_ids(2, 5)
    with pytest.raises(ValueError):
        m()
    with pytest.raises(ValueError):
        m(ids, embeds=m.embed(ids))
    with pytest.raises(ValueError):
        m(embeds=torch.zeros(2, 5, 31))
    with pytest.raises(ValueError):
        m(ids, key_padding_mask=torch.ones(2, 5))  # not bool
    with pytest.raises(ValueError):
        m(embeds=m.embed(ids), cos=torch.zeros(5, 4))  # sin missing
    with pytest.raises(ValueError):
        m(embeds=m.embed(ids), cos=torch.zeros(5, 3), sin=torch.zeros(5, 3))
    with pytest.raises(ValueError):
        next_token_loss(torch.zeros(2, 5, 7), ids, reduction="sum")
    with pytest.raises(ValueError):
        next_token_loss(torch.zeros(2, 5, 7), ids, torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError):
        next_token_loss(torch.zeros(2, 1, 7), ids[:, :1])
    with pytest.raises(ValueError):
        GPT(tiny_cfg(n_heads=3))


def test_attention_mask_never_empties_a_row():
    """CPU SDPA zeroes fully-masked rows, but fused GPU kernels may return NaN: never build one."""
    kpm = torch.tensor([[False, True, True, False], [True, True, False, False]])
    mask = GPT._attention_mask(kpm)  # [B, 1, W, W]
    assert mask.shape == (2, 1, 4, 4) and mask.dtype == torch.bool
    assert mask.any(-1).all()
    want_row2 = torch.tensor([False, True, True, False])  # query 2 of row 0: real causal keys 1, 2
    assert torch.equal(mask[0, 0, 2], want_row2)
    assert torch.equal(mask[0, 0, 3], torch.tensor([False, True, True, True]))  # padding query: + itself
    assert not mask[1, 0, 1, 2]  # causal
