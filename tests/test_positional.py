"""Tests for mc/nets/positional.py: plain and LOD-aware rotary encodings."""
import math

import pytest
import torch

from mc.nets.positional import (apply_rotary, lod_amplitude, lod_rotary_cos_sin, rope_frequencies,
                           rotary_cos_sin)

HD, BASE, K = 16, 10000.0, 4


def test_frequencies_decrease_from_one():
    f = rope_frequencies(HD, BASE)
    assert f.shape == (HD // 2,) and f.dtype == torch.float32
    assert f[0].item() == 1.0
    assert torch.all(f[1:] < f[:-1])
    assert torch.allclose(f[-1], torch.tensor(BASE ** (-(HD - 2) / HD)))


def test_rotary_matches_closed_form():
    pos = torch.tensor([0.0, 1.0, 7.5, 100.0])
    cos, sin = rotary_cos_sin(pos, HD, BASE)
    assert cos.shape == (4, HD // 2)
    for i, p in enumerate(pos.tolist()):
        for band in range(HD // 2):
            ang = p * BASE ** (-2 * band / HD)
            assert abs(cos[i, band].item() - math.cos(ang)) < 1e-5
            assert abs(sin[i, band].item() - math.sin(ang)) < 1e-5


def test_lod0_equals_plain_rotary():
    g = torch.Generator().manual_seed(0)
    pos = torch.randint(0, 5000, (3, 20), generator=g).float()
    lods = torch.zeros(3, 20, dtype=torch.long)
    cos0, sin0 = rotary_cos_sin(pos, HD, BASE)
    cos1, sin1 = lod_rotary_cos_sin(pos, lods, K, HD, BASE)
    assert (cos0 - cos1).abs().max().item() <= 1e-6
    assert (sin0 - sin1).abs().max().item() <= 1e-6
    assert torch.equal(cos0, cos1) and torch.equal(sin0, sin1)  # in fact bit for bit


def test_lod0_entries_exact_inside_mixed_context():
    pos = torch.tensor([[7.5, 40.5, 64.0, 65.0, 66.0]])
    lods = torch.tensor([[1, 2, 0, 0, 0]])
    cos, sin = lod_rotary_cos_sin(pos, lods, K, HD, BASE)
    pc, ps = rotary_cos_sin(pos, HD, BASE)
    assert torch.equal(cos[:, 2:], pc[:, 2:]) and torch.equal(sin[:, 2:], ps[:, 2:])
    assert not torch.equal(cos[:, :2], pc[:, :2])


@pytest.mark.parametrize("k,lod", [(4, 2), (4, 3), (32, 1), (32, 2)])
def test_lod_damps_high_bands_only(k, lod):
    amp = lod_amplitude(torch.tensor([lod]), k, HD, BASE)[0]  # [hd/2]
    span = k ** lod
    wavelengths = 2 * math.pi / rope_frequencies(HD, BASE)
    short = wavelengths < span
    assert short.any() and (~short).any(), "test setting must have both kinds of band"
    assert torch.all(amp[short] < 1.0) and torch.all(amp[short] >= 0.0)
    assert torch.all(amp[~short] == 1.0)
    assert torch.allclose(amp[short], wavelengths[short] / span)
    # amplitude of the encoded (cos, sin) pair
    pos = torch.tensor([12.5])
    cos, sin = lod_rotary_cos_sin(pos, torch.tensor([lod]), k, HD, BASE)
    mag = (cos ** 2 + sin ** 2).sqrt()[0]
    assert torch.all(mag[short] < 1.0 - 1e-4)
    assert torch.allclose(mag[~short], torch.ones_like(mag[~short]), atol=1e-6)


def test_amplitude_monotone_in_lod():
    amps = lod_amplitude(torch.arange(0, 5), K, HD, BASE)  # [5, hd/2]
    assert torch.all(amps[1:] <= amps[:-1])
    assert torch.all(amps[0] == 1.0)


def test_apply_rotary_preserves_norm_lod0():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 10, HD, generator=g)
    pos = torch.arange(10).float().expand(2, 10)
    cos, sin = lod_rotary_cos_sin(pos, torch.zeros(2, 10, dtype=torch.long), K, HD, BASE)
    y = apply_rotary(x, cos, sin)
    assert y.shape == x.shape
    assert torch.allclose(y.norm(dim=-1), x.norm(dim=-1), atol=1e-5)
    # shared [W, hd/2] tables give the same result
    y2 = apply_rotary(x, cos[0], sin[0])
    assert torch.allclose(y, y2)


def test_apply_rotary_shrinks_damped_bands():
    x = torch.ones(1, 1, 1, HD)
    cos, sin = lod_rotary_cos_sin(torch.tensor([[100.0]]), torch.tensor([[2]]), K, HD, BASE)
    y = apply_rotary(x, cos, sin)
    assert y.norm() < x.norm() - 1e-3


def test_rotary_relative_property():
    """q.k after rotation depends only on the position difference (plain RoPE)."""
    g = torch.Generator().manual_seed(2)
    q = torch.randn(1, 1, 1, HD, generator=g)
    k = torch.randn(1, 1, 1, HD, generator=g)

    def dot(pq, pk):
        cq, sq = rotary_cos_sin(torch.tensor([pq]), HD, BASE)
        ck, sk = rotary_cos_sin(torch.tensor([pk]), HD, BASE)
        return (apply_rotary(q, cq, sq) * apply_rotary(k, ck, sk)).sum()

    assert torch.allclose(dot(10.0, 3.0), dot(107.0, 100.0), atol=1e-4)


def test_bad_inputs_raise():
    with pytest.raises(ValueError):
        rope_frequencies(15, BASE)
    with pytest.raises(ValueError):
        lod_rotary_cos_sin(torch.zeros(3), torch.zeros(4, dtype=torch.long), K, HD, BASE)
    with pytest.raises(ValueError):
        lod_rotary_cos_sin(torch.zeros(3), torch.zeros(3), K, HD, BASE)  # float lods
    with pytest.raises(ValueError):
        lod_amplitude(torch.zeros(3, dtype=torch.long), 1, HD, BASE)
    with pytest.raises(ValueError):
        apply_rotary(torch.zeros(1, 1, 5, HD), torch.zeros(4, HD // 2), torch.zeros(4, HD // 2))


def test_apply_rotary_full_is_bit_equal_to_apply_rotary():
    """The decode step's 4-op rotation gives the very floats of apply_rotary (greedy cached decoding
    must equal the uncached path), for plain and LOD-damped tables."""
    from mc.nets.positional import apply_rotary_full, lod_rotary_cos_sin, rotary_full  # noqa: PLC0415

    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 6, 9, 16, generator=g)  # [B, H, S, hd]
    pos = torch.rand(9, generator=g) * 500
    lods = torch.randint(0, 3, (9,), generator=g)
    cos, sin = lod_rotary_cos_sin(pos, lods, 8, 16, 10000.0)  # [S, hd/2]
    assert torch.equal(apply_rotary_full(x, *rotary_full(cos, sin)), apply_rotary(x, cos, sin))
