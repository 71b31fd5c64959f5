"""Stage-2 host/device split: vectorised gather tables, the prefetch thread, and no host sync in a micro-step."""
from __future__ import annotations

import dataclasses
import threading

import pytest
import torch

import mc.controller as controller_module
import mc.nets.losses as losses_module
from mc.build import build_controller
from mc.config import PAD_ID, ConfigError
from mc.config_loading import load_config
from mc.gather import gather_tables
from mc.train.common import make_sampler, read_metrics
from mc.train.checkpoint import load_checkpoint
from mc.train.prefetch import PlanPrefetcher, prefetch_depth
from mc.train.stage1 import train_stage1
from mc.train.stage2 import train_stage2
from mc.train.sync_audit import audit_micro_step, cuda_sync_check
from mc.variants import sample_variants
from test_train import _with_base, tiny_cfg


def _reference_tables(wcs, B, T, K, max_lod, bucket):
    """The per-entry Python construction the vectorised tables replace (the definition they must meet)."""
    R, V = len(wcs), len(wcs) // B
    sizes = [T // K**lv for lv in range(max_lod + 1)]
    offsets = [sum(B * s for s in sizes[:lv]) for lv in range(max_lod + 2)]
    index = [[offsets[-1]] * bucket for _ in range(R)]
    lods, pos, tok = ([[0] * bucket for _ in range(R)], [[0.0] * bucket for _ in range(R)],
                      [[-1] * bucket for _ in range(R)])
    for r, wc in enumerate(wcs):
        for j, ((lod, idx), p) in enumerate(zip(wc.entries, wc.positions())):
            index[r][j] = offsets[lod] + (r // V) * sizes[lod] + idx
            lods[r][j], pos[r][j], tok[r][j] = lod, p, (idx if lod == 0 else -1)
    return {"index": torch.tensor(index), "lods": torch.tensor(lods), "positions": torch.tensor(pos, dtype=torch.float32),
            "token_index": torch.tensor(tok), "lengths": torch.tensor([len(w) for w in wcs]),
            "lod_map": torch.stack([wc.lod_map() for wc in wcs])}


@pytest.mark.parametrize("K,max_lod,T,budget,recent,bucket,B,n_random,seed", [
    (4, 2, 64, 32, 8, 32, 2, 2, 0),
    (4, 2, 64, 20, 8, 32, 3, 1, 1),  # rows shorter than the bucket: padding
    (2, 3, 48, 24, 4, 24, 1, 3, 2),
    (32, 2, 4096, 512, 128, 512, 2, 3, 3),  # the h100 geometry (B=2 to stay quick)
])
def test_gather_tables_equal_the_per_entry_construction(K, max_lod, T, budget, recent, bucket, B, n_random, seed):
    g = torch.Generator().manual_seed(seed)
    wcs = [wc for _ in range(B) for wc in sample_variants(T, block_size=K, max_lod=max_lod, max_entries=budget,
                                                           recent_tokens=recent, n_random=n_random, generator=g)]
    got = gather_tables(wcs, batch=B, tokens=T, max_lod=max_lod, bucket=bucket)
    want = _reference_tables(wcs, B, T, K, max_lod, bucket)
    for k, v in want.items():
        assert got[k].dtype == v.dtype and torch.equal(got[k], v), k


def _micro_steps(ctrl, next_plan, n):
    """n micro-steps with backward and an SGD step each; the losses and scores they produced."""
    opt = torch.optim.SGD(ctrl.aux_parameters(), lr=0.1)
    outs = []
    for _ in range(n):
        out = ctrl.run_step(next_plan())
        out.total.backward()
        ctrl.end_micro_step()
        opt.step()
        ctrl.zero_grad(opt)
        outs.append((out.total.detach(), out.tail_losses, out.preference.loss.detach(), out.scores.detach()))
    return outs


def test_prefetched_plans_give_bit_identical_losses_and_generator_state():
    cfg = tiny_cfg()
    sampler = make_sampler(cfg, "train", cfg.mc.history_tokens)
    b, t, n = cfg.train.stage2.batch_size, cfg.mc.history_tokens, 5
    runs, states = [], []
    for depth in (0, 3):
        ctrl = build_controller(cfg, device=torch.device("cpu"))
        gen = torch.Generator().manual_seed(7)
        with PlanPrefetcher(lambda: ctrl.prepare_step(sampler.sample(b, t, gen).tokens, gen), gen, depth=depth) as pf:
            runs.append(_micro_steps(ctrl, pf.next, n))
            states.append(pf.consumed_generator().get_state())
            assert len(pf.waits) == n
    for i, (a, c) in enumerate(zip(*runs)):
        for x, y in zip(a, c):
            assert torch.equal(x, y), f"micro-step {i}: prefetched result differs from the inline one"
    assert torch.equal(states[0], states[1]), "consumed state must ignore the plans made ahead"


def test_prefetch_thread_error_is_raised_in_the_loop_and_the_thread_stops():
    calls = []

    def make():
        calls.append(1)
        if len(calls) == 2:
            raise ValueError("corpus file vanished")
        return "plan"

    pf = PlanPrefetcher(make, torch.Generator(), depth=2)
    assert pf.next() == "plan"
    with pytest.raises(RuntimeError, match="prefetch thread: ValueError: corpus file vanished"):
        pf.next()
    pf.close()
    assert not any(th.name == "mc-stage2-prefetch" and th.is_alive() for th in threading.enumerate())
    with pytest.raises(ValueError, match="depth"):
        PlanPrefetcher(make, torch.Generator(), depth=-1)


@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("s1")
    train_stage1(tiny_cfg(s1_steps=2), d, progress=False)
    return d


@pytest.mark.parametrize("setting,device,depth", [(-1, "cuda", 2), (-1, "cpu", 0), (0, "cuda", 0), (3, "cpu", 3)])
def test_prefetch_depth_by_device_unless_set(setting, device, depth):
    # -1 (the default): a producer thread overlaps a GPU's work, but on a CPU it only takes the compute's cores
    assert prefetch_depth(setting, torch.device(device)) == depth


def test_prefetch_below_minus_one_is_a_config_error():
    assert load_config(["preset=smoke"]).train.prefetch == -1
    with pytest.raises(ConfigError, match="train.prefetch"):
        load_config(["preset=smoke", "train.prefetch=-2"])


def test_stage2_loop_with_prefetch_matches_inline_and_logs_every_log_every(base_run, tmp_path):
    def run(name, **train):
        cfg = tiny_cfg(s2_steps=5)
        cfg.train = dataclasses.replace(cfg.train, **train)
        cfg.train.stage2 = dataclasses.replace(cfg.train.stage2, eval_every=5, ckpt_every=5)
        d = _with_base(base_run, tmp_path / name)
        train_stage2(cfg, d, progress=False)
        return read_metrics(d / "stage2" / "metrics.jsonl"), load_checkpoint(d / "stage2" / "ckpt.pt")

    (m0, c0), (m2, c2), (ml, _) = run("inline", prefetch=0), run("prefetch", prefetch=2), run("sparse", log_every=2)
    assert [r["step"] for r in m0] == [1, 2, 3, 4, 5]
    for a, b in zip(m0, m2):
        for k in ("lm_loss", "pref_loss", "baseline_loss", "gap", "val_lm_loss"):
            assert a.get(k) == b.get(k), f"step {a['step']} {k}: inline {a.get(k)} vs prefetched {b.get(k)}"
    for net in ("gistnet", "lensnet"):
        for k, v in c0["controller"][net].items():
            assert torch.equal(v, c2["controller"][net][k]), f"{net}.{k} differs with prefetch"
    assert torch.equal(c0["rng"]["data"], c2["rng"]["data"])
    assert [r["step"] for r in ml] == [2, 4, 5]  # log steps, and the last (eval + checkpoint) step
    mean12 = (m0[0]["lm_loss"] + m0[1]["lm_loss"]) / 2  # a sparse record is the mean since the last one
    assert ml[0]["lm_loss"] == pytest.approx(mean12, rel=1e-6)


def test_micro_step_device_half_has_no_host_sync_at_h100_geometry():
    cfg = load_config(["preset=h100", "train.device=cpu"])
    res = audit_micro_step(cfg)
    assert res["geometry"] == {"batch": 8, "variants": 4, "tokens": 4096, "entries": 512}
    assert res["passed"], res


def test_sync_audit_catches_a_host_read_and_a_blocking_copy(monkeypatch):
    cfg = load_config(["preset=smoke", "train.device=cpu"])
    real_pref, real_tail = losses_module.preference_loss, controller_module.base_tail_loss

    def reads_back(*a, **k):
        res = real_pref(*a, **k)
        if res.loss.detach() > 0:  # bool() of a device value: waits for the device
            pass
        return res

    monkeypatch.setattr(losses_module, "preference_loss", reads_back)  # called by losses.stage2_objective
    res = audit_micro_step(cfg, micro_steps=1)
    assert not res["passed"] and "mc/nets/losses.py" in res["host_reads"][0]
    monkeypatch.setattr(losses_module, "preference_loss", real_pref)

    def copies_in(*a, **k):
        loss, logits = real_tail(*a, **k)
        return loss * torch.tensor(1.0, device=logits.device), logits

    monkeypatch.setattr(controller_module, "base_tail_loss", copies_in)
    res = audit_micro_step(cfg, micro_steps=1)
    assert not res["passed"] and res["blocking_copies"] and "torch.tensor" in res["blocking_copies"][0]


@pytest.mark.gpu
def test_cuda_micro_step_never_syncs_and_plans_are_pinned():
    cfg = tiny_cfg()
    cfg.train = dataclasses.replace(cfg.train, device="cuda")
    ctrl = build_controller(cfg, device=torch.device("cuda"))
    plan = ctrl.prepare_step(torch.randint(0, 256, (2, cfg.mc.history_tokens)), torch.Generator().manual_seed(0))
    assert all(v.is_pinned() for v in plan.tensors().values())
    assert int(plan.token_ids[plan.token_ids != PAD_ID].numel()) > 0
    res = cuda_sync_check(ctrl, cfg)
    assert res["passed"], res["error"]
