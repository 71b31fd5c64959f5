"""Eager tests of GistNet, LensNet and the shared block (shapes, init, padding, gradients)."""
from __future__ import annotations

import math

import pytest
import torch

from mc.nets.bidirectional import BidirectionalAttention, BidirectionalBlock
from mc.config import GistNetConfig, LensNetConfig
from mc.nets.gistnet import GistNet
from mc.nets.lensnet import NUM_FEATURES, LensNet

D, K, MAX_LOD = 32, 4, 2


def make_gist(pooling: str = "mean_mlp", seed: int = 0) -> GistNet:
    torch.manual_seed(seed)
    return GistNet(GistNetConfig(d_model=32, n_layers=2, n_heads=4, pooling=pooling), D, K)


def make_lens(seed: int = 0, query_match: bool = False) -> LensNet:
    torch.manual_seed(seed)
    return LensNet(LensNetConfig(d_model=32, n_layers=2, n_heads=4, query_match=query_match), D, K, MAX_LOD)


def lens_inputs(lengths: list[int], width: int, seed: int = 1) -> dict[str, torch.Tensor]:
    """A padded batch of working contexts: row b has lengths[b] real entries, then padding.

    Each row tiles a history: a few coarse gists, then LOD0 tokens; positions are span centres.
    """
    g = torch.Generator().manual_seed(seed)
    b = len(lengths)
    embeds = torch.randn(b, width, D, generator=g)
    mask = torch.zeros(b, width, dtype=torch.bool)
    positions = torch.zeros(b, width)
    lods = torch.zeros(b, width, dtype=torch.long)
    num_tokens = torch.zeros(b)
    for r, n in enumerate(lengths):
        start = 0
        for i in range(n):
            lod = 2 if i < 2 else (1 if i < 4 else 0)
            w = K**lod
            mask[r, i] = True
            lods[r, i] = lod
            positions[r, i] = start + (w - 1) / 2
            start += w
        num_tokens[r] = start
    return {"embeds": embeds, "mask": mask, "positions": positions, "lods": lods, "num_tokens": num_tokens}


def pad_more(inp: dict[str, torch.Tensor], extra: int, fill: float = 0.0) -> dict[str, torch.Tensor]:
    """Append ``extra`` padded slots; padded embeds hold ``fill`` (garbage must not matter)."""
    b, w, _ = inp["embeds"].shape
    return {
        "embeds": torch.cat([inp["embeds"], torch.full((b, extra, D), fill)], dim=1),
        "mask": torch.cat([inp["mask"], torch.zeros(b, extra, dtype=torch.bool)], dim=1),
        "positions": torch.cat([inp["positions"], torch.full((b, extra), 7.0)], dim=1),
        "lods": torch.cat([inp["lods"], torch.full((b, extra), 1, dtype=torch.long)], dim=1),
        "num_tokens": inp["num_tokens"],
    }


# ----------------------------------------------------------------------------- shared block


def test_block_key_mask_excludes_masked_keys():
    torch.manual_seed(0)
    attn = BidirectionalAttention(16, 4)
    x = torch.randn(2, 5, 16)
    mask = torch.tensor([[True, True, True, False, False]] * 2)
    y = attn(x, key_mask=mask)
    x2 = x.clone()
    x2[:, 3:] = 100.0  # masked keys/values changed: the real queries' outputs must not move
    assert torch.allclose(attn(x2, key_mask=mask)[:, :3], y[:, :3], atol=1e-6)
    assert BidirectionalBlock(16, 4)(x).shape == x.shape


# ----------------------------------------------------------------------------- GistNet


@pytest.mark.parametrize("pooling", ["mean_mlp", "query"])
def test_gistnet_shape_and_mean_pooling_at_init(pooling):
    net = make_gist(pooling)
    blocks = torch.randn(6, K, D)
    out = net(blocks)
    assert out.shape == (6, D)
    # Tiny out-projection: the gist is the plain mean at init up to ~1e-3*sqrt(d) per element.
    assert torch.allclose(out, blocks.mean(dim=1), atol=0.05)
    assert not torch.equal(out, blocks.mean(dim=1))  # the learned path is live from step 0
    assert out.abs().sum() > 0


def test_gistnet_not_zero_for_nonzero_input_and_batched_rows_independent():
    net = make_gist()
    blocks = torch.randn(5, K, D)
    with torch.no_grad():
        # Give the learned path a real contribution, then check batching does not mix rows.
        net.out_proj.weight.normal_(0.0, 0.1)
        full = net(blocks)
        rows = torch.cat([net(blocks[i : i + 1]) for i in range(5)])
    assert torch.allclose(full, rows, atol=1e-5)
    assert (full.norm(dim=-1) > 0).all()
    assert not torch.allclose(full, blocks.mean(dim=1), atol=1e-3)  # the learned path is live


@pytest.mark.parametrize(
    "shape, what",
    [((K, D), "2-d"), ((3, K + 1, D), "block_size"), ((3, K, D + 1), "embed_dim"), ((1, 3, K, D), "4-d")],
)
def test_gistnet_bad_shapes_raise(shape, what):
    net = make_gist()
    with pytest.raises(ValueError, match=r"GistNet expects blocks of shape \[N, K=4, D=32\]"):
        net(torch.randn(*shape))


def test_gistnet_bad_config_raises():
    with pytest.raises(ValueError, match="pooling"):
        GistNet(GistNetConfig(d_model=32, n_heads=4, pooling="max"), D, K)
    with pytest.raises(ValueError, match="divisible"):
        GistNet(GistNetConfig(d_model=30, n_heads=4), D, K)


def test_gistnet_output_norm_tokens_puts_every_gist_at_the_set_rms_and_gradients_still_flow():
    torch.manual_seed(0)
    net = GistNet(GistNetConfig(d_model=32, n_layers=2, n_heads=4, output_norm="tokens"), D, K)
    net.set_output_rms(0.25)
    blocks = torch.randn(5, K, D) * torch.tensor([0.01, 1.0, 10.0, 100.0, 3.0])[:, None, None]  # inputs of any scale
    out = net(blocks)
    assert torch.allclose(out.pow(2).mean(-1).sqrt(), torch.full((5,), 0.25), rtol=2e-3)  # rms_norm's eps at 0.01
    out.sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for n, p in net.named_parameters() if n != "slot_embed")
    assert "output_rms" not in net.state_dict()  # follows the base it is built over, not the checkpoint
    free = make_gist()
    assert free(blocks).pow(2).mean(-1).sqrt().max() > 1.0  # the default leaves the scale to training
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="output RMS"):
            net.set_output_rms(bad)
    with pytest.raises(ValueError, match="output_norm"):
        GistNet(GistNetConfig(d_model=32, n_heads=4, output_norm="unit"), D, K)


def test_build_controller_scales_gists_to_the_bases_token_embeddings():
    from mc.build import build_controller  # noqa: PLC0415
    from mc.config import ConfigError  # noqa: PLC0415
    from mc.config_loading import load_config  # noqa: PLC0415
    from _tiny_config import TINY  # noqa: PLC0415

    ctrl = build_controller(load_config(TINY + ["gistnet.output_norm=tokens"]), device=torch.device("cpu"))
    want = ctrl.base.tok_emb.weight.pow(2).mean(-1).sqrt().mean()
    assert float(ctrl.gistnet.output_rms) == pytest.approx(float(want), rel=1e-5)
    with pytest.raises(ConfigError, match="gistnet.output_norm"):
        load_config(TINY + ["gistnet.output_norm=unit"])


@pytest.mark.parametrize("pooling", ["mean_mlp", "query"])
def test_gistnet_gradients_reach_every_parameter(pooling):
    net = make_gist(pooling)
    blocks = torch.randn(4, K, D)
    target = torch.randn(4, D)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)

    def loss_fn():
        return ((net(blocks) - target) ** 2).mean()

    for step in range(2):  # from the very first backward, and after an optimizer step
        opt.zero_grad()
        loss_fn().backward()
        for name, p in net.named_parameters():
            assert p.grad is not None and torch.isfinite(p.grad).all(), name
            assert p.grad.abs().sum() > 0, f"step {step}: no gradient reached {name}"
        opt.step()


def test_gistnet_query_pooling_learns_a_different_gist():
    net = make_gist("query")
    assert hasattr(net, "query") and not hasattr(net, "pool_mlp")
    blocks = torch.randn(3, K, D)
    with torch.no_grad():
        net.out_proj.weight.normal_(0.0, 0.1)
        out = net(blocks)
    assert out.shape == (3, D) and torch.isfinite(out).all()
    assert not torch.allclose(out, blocks.mean(dim=1), atol=1e-3)


# ----------------------------------------------------------------------------- LensNet


@pytest.mark.parametrize("query_match", [False, True])
def test_lensnet_shapes_range_and_padding_zero(query_match):
    net = make_lens(query_match=query_match)
    inp = lens_inputs([10, 6], width=12)
    scores = net(**inp)
    logits = net.logits(**inp)
    assert scores.shape == (2, 12) and logits.shape == (2, 12)
    assert torch.allclose(scores, torch.tanh(logits))
    assert ((scores > -1) & (scores < 1)).all()
    assert (scores[~inp["mask"]] == 0).all()
    assert (scores[inp["mask"]] != 0).all()


@pytest.mark.parametrize("query_match", [False, True])
def test_lensnet_padding_invariance(query_match):
    net = make_lens(query_match=query_match)
    inp = lens_inputs([10, 6, 1], width=10)
    base = net(**inp)
    for extra, fill in ((1, 0.0), (6, 3.0), (22, float("nan"))):
        padded = net(**pad_more(inp, extra, fill))
        assert torch.isfinite(padded).all()
        torch.testing.assert_close(padded[:, :10], base, rtol=0, atol=1e-5)
        assert (padded[:, 10:] == 0).all()


@pytest.mark.parametrize("query_match", [False, True])
def test_lensnet_padding_invariance_in_train_mode_and_rows_independent(query_match):
    net = make_lens(query_match=query_match).train()
    inp = lens_inputs([9, 4], width=9)
    both = net(**inp)
    one = net(**{k: v[1:2] for k, v in inp.items()})
    torch.testing.assert_close(both[1:2], one, rtol=0, atol=1e-5)


@pytest.mark.parametrize("query_match", [False, True])
def test_lensnet_empty_row_has_no_nan(query_match):
    net = make_lens(query_match=query_match)
    inp = lens_inputs([5, 0], width=8)
    scores = net(**inp)
    assert torch.isfinite(scores).all()
    assert (scores[1] == 0).all()
    scores.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in net.parameters() if p.grad is not None)


def test_lensnet_features_values():
    net = make_lens()
    inp = lens_inputs([6], width=8)
    f = net.features(inp["mask"], inp["positions"], inp["lods"], inp["num_tokens"])
    assert f.shape == (1, 8, NUM_FEATURES)
    n = float(inp["num_tokens"][0])  # 2*16 + 2*4 + 2*1 = 42 tokens
    assert n == 42
    # entry 0: LOD2 covering [0, 16): lod 1.0, width 16/42, 26 tokens after it.
    torch.testing.assert_close(f[0, 0], torch.tensor([1.0, 16 / n, 26 / n, math.log1p(26) / math.log1p(n)]))
    # last real entry: LOD0 token 41 -> nothing after it.
    torch.testing.assert_close(f[0, 5], torch.tensor([0.0, 1 / n, 0.0, 0.0]))
    assert (f[0, 6:] == 0).all()
    assert ((f >= 0) & (f <= 1)).all()


def test_lensnet_scores_depend_on_features():
    net = make_lens()
    inp = lens_inputs([6], width=6)
    a = net.logits(**inp)
    b = net.logits(**{**inp, "num_tokens": inp["num_tokens"] * 4})
    assert not torch.allclose(a, b)


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda i: {**i, "embeds": i["embeds"][..., :-1]}, "embeds of shape"),
        (lambda i: {**i, "mask": i["mask"][:, :-1]}, "mask of shape"),
        (lambda i: {**i, "mask": i["mask"].float()}, "mask must be bool"),
        (lambda i: {**i, "lods": i["lods"].float()}, "lods must be an integer"),
        (lambda i: {**i, "positions": i["positions"][None]}, "positions of shape"),
        (lambda i: {**i, "num_tokens": i["num_tokens"][:, None]}, "num_tokens of shape"),
    ],
)
def test_lensnet_bad_inputs_raise(change, match):
    net = make_lens()
    with pytest.raises(ValueError, match=match):
        net(**change(lens_inputs([4, 3], width=5)))


def test_lensnet_bad_config_raises():
    with pytest.raises(ValueError, match="max_lod"):
        LensNet(LensNetConfig(d_model=32, n_heads=4), D, K, 0)


@pytest.mark.parametrize("query_match", [False, True])
def test_lensnet_gradients_reach_every_parameter(query_match):
    net = make_lens(query_match=query_match)
    inp = lens_inputs([10, 7], width=12)
    target = torch.randn(2, 12)
    loss = ((net(**inp) - target) ** 2 * inp["mask"]).sum()
    loss.backward()
    for name, p in net.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, f"no gradient reached {name}"


def test_lensnet_buffers_follow_dtype_and_are_not_in_state_dict():
    net = make_lens()
    assert "log_k" not in net.state_dict() and "max_lod_t" not in net.state_dict()
    net64 = make_lens().double()
    inp = {k: (v.double() if v.is_floating_point() else v) for k, v in lens_inputs([5], width=6).items()}
    assert net64(**inp).dtype == torch.float64


def test_lensnet_query_match_adds_a_term_that_vanishes_with_a_zero_query():
    """query_match adds <q(h_last), k(h_i)> / sqrt(d) to every logit: with q = 0 the scores equal a plain
    LensNet's with the same weights; with q != 0 every real entry's logit moves, padding stays 0. That the
    term reads the last *real* entry, not a padded one, is what the padding-invariance tests check."""
    net = make_lens(query_match=True)
    plain = make_lens(query_match=False)
    plain.load_state_dict({k: v for k, v in net.state_dict().items() if not k.startswith("match_")})
    inp = lens_inputs([9, 5], width=10)
    with torch.no_grad():
        net.match_q.weight.zero_()
        net.match_q.bias.zero_()
        torch.testing.assert_close(net(**inp), plain(**inp), rtol=0, atol=1e-6)
        net.match_q.weight.normal_(0, 0.5)
        net.match_q.bias.normal_(0, 0.5)
        term = net.logits(**inp) - plain.logits(**inp)
    assert (term[inp["mask"]].abs() > 0).all() and (term[~inp["mask"]] == 0).all()
