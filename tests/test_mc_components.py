"""MCController's boundary discipline, proved with eager (mode "off") nets in this process.

- Mock LensNet / GistNet record who called them (``inspect.stack()``): every path (training step,
  prefill, append, refocus, tree building, generate) reaches them only through
  ``CompiledNet.run`` called from one of the three controller helpers.
- The helpers return a clone, never the raw module output, and count exactly one clone per net call.
- Step marks: one per micro-step (after its backward, never between forward and backward), one per
  allocator iteration and one per GistNet inference call, each before its call; counted by reason
  and with a counting fake of ``torch.compiler.cudagraph_mark_step_begin``.
- Held outputs survive later calls; re-entrance from a backward hook is detected, reported and
  raises, and never issues a step mark.

Compiled runs (default / reduce-overhead, GPU) are in tests/test_controller_compile.py.
"""
from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _compile_scenarios import random_mwc  # noqa: E402 - mc.harness.probes.make_mwc, seeded
from _tiny_config import D, K, tiny_config  # noqa: E402 - the one tiny test config

from mc.build import build_nets  # noqa: E402
from mc.compile.boundary import StepMarker  # noqa: E402
from mc.controller import MCController  # noqa: E402
from mc.nets.gpt import GPT  # noqa: E402

HELPERS = {"gistnet": {"_run_gistnet"},
           "lensnet": {"_run_lensnet_batched", "_lensnet_allocator_scores"}}
TORCH_DIR = os.sep + "torch" + os.sep


def _callers() -> tuple:
    """The first two (file, function) frames above the mock's forward that are not torch internals."""
    chain = []
    for fi in inspect.stack(context=0)[2:]:  # [0] this function, [1] the mock's forward
        if TORCH_DIR in fi.filename:
            continue  # nn.Module.__call__ machinery (or Dynamo, if it were compiled)
        chain.append((Path(fi.filename).name, fi.function))
        if len(chain) == 2:
            break
    return tuple(chain)


class MockGistNet(nn.Module):
    """GistNet's signature ([N, K, D] -> [N, D]); deterministic mean pooling times a parameter."""

    def __init__(self, log: list) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(1.0))
        self.log = log
        self.raw_ptrs: list[int] = []
        self.raw_alive: list = []

    def forward(self, blocks):
        self.log.append(("gistnet", _callers(), tuple(blocks.shape)))
        out = blocks.mean(1) * self.scale  # [N, D]
        self.raw_ptrs.append(out.data_ptr())
        self.raw_alive.append(out)  # held, so a later tensor cannot reuse the address and fool the check
        return out


class MockLensNet(nn.Module):
    """LensNet's signature (embeds, mask, positions, lods, num_tokens) -> [B, W] in (-1, 1)."""

    def __init__(self, log: list) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(0.5))
        self.index = None  # no token index (mc.nets.token_index): the controller passes no match
        self.log = log
        self.raw_ptrs: list[int] = []
        self.raw_alive: list = []

    def forward(self, embeds, mask, positions, lods, num_tokens):
        self.log.append(("lensnet", _callers(), tuple(embeds.shape)))
        feat = embeds.mean(-1) + positions / num_tokens[:, None] - 0.1 * lods.float()  # [B, W]
        out = torch.tanh(self.scale * feat) * mask  # padded entries score 0
        self.raw_ptrs.append(out.data_ptr())
        self.raw_alive.append(out)  # held, so a later tensor cannot reuse the address and fool the check
        return out


def _mock_controller(log: list, **alloc) -> MCController:
    cfg = tiny_config("off")
    cfg.allocator.inference.refocus_interval = 4  # generate() then refocuses on its own
    for k, v in alloc.items():
        setattr(cfg.allocator, k, v)
    torch.manual_seed(0)
    return MCController(cfg, GPT(cfg.model), MockGistNet(log), MockLensNet(log))


def _real_controller(cfg=None) -> MCController:
    cfg = cfg or tiny_config("off")
    base, gist, lens = build_nets(cfg, torch.device("cpu"))
    return MCController(cfg, base, gist, lens)


def _train_micro_step(c: MCController, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    out = c.train_step(torch.randint(0, 256, (2, 64), generator=gen), gen)
    out.total.backward()
    c.end_micro_step()
    return out


def _prompt(n: int = 100, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------- 1. one boundary
def _run_path(c: MCController, path: str) -> None:
    if path == "train_step":
        _train_micro_step(c)
    elif path == "begin_session":
        c.begin_session(_prompt(100))
    elif path == "append":
        c.append(torch.arange(6), refocus=False)
    elif path == "refocus":
        c.refocus()
    elif path == "tree_building":  # the session tree's gist_fn is the helper, not the net
        s = c.session
        ids = torch.arange(16)
        s.tree.append(ids, c.base.embed(ids[None])[0].detach())
    elif path == "generate":
        c.generate(8)
    else:  # pragma: no cover
        raise AssertionError(path)


# path -> (expected GistNet calls > 0, expected LensNet calls > 0)
PATHS = {"train_step": (True, True), "begin_session": (True, False), "append": (True, False),
         "refocus": (False, True), "tree_building": (True, False), "generate": (True, True)}


@pytest.mark.parametrize("path", list(PATHS))
def test_every_path_calls_the_nets_only_through_the_helpers(path):
    log: list = []
    c = _mock_controller(log)
    if path not in ("train_step", "begin_session"):
        c.begin_session(_prompt(100))
    log.clear()
    calls0 = {n: sum(c.telemetry.counters.totals[n][x]["calls"] for x in ("train", "inference"))
              for n in ("gistnet", "lensnet")}
    _run_path(c, path)
    want_gist, want_lens = PATHS[path]
    by_net = {n: [e for e in log if e[0] == n] for n in ("gistnet", "lensnet")}
    assert bool(by_net["gistnet"]) == want_gist, f"{path}: GistNet calls {by_net['gistnet']}"
    assert bool(by_net["lensnet"]) == want_lens, f"{path}: LensNet calls {by_net['lensnet']}"
    for net, entries in by_net.items():
        for _, callers, shape in entries:
            assert callers[0] == ("boundary.py", "run"), f"{path}: {net} not called via CompiledNet.run: {callers}"
            assert callers[1][0] == "controller.py" and callers[1][1] in HELPERS[net], (
                f"{path}: {net} {shape} reached from {callers[1]}, expected one of {sorted(HELPERS[net])}")
        # every module call was counted by the boundary (nothing bypassed it)
        total = sum(c.telemetry.counters.totals[net][x]["calls"] for x in ("train", "inference"))
        assert total - calls0[net] == len(entries)


def test_training_step_uses_the_batched_helper_once_and_gistnet_once_per_level():
    log: list = []
    c = _mock_controller(log)
    _train_micro_step(c)
    gist = [e for e in log if e[0] == "gistnet"]
    lens = [e for e in log if e[0] == "lensnet"]
    assert [e[2] for e in gist] == [(32, K, D), (8, K, D)]  # B*T/K and B*T/K**2 blocks, one call each
    assert len(lens) == 1 and lens[0][1][1] == ("controller.py", "_run_lensnet_batched")
    assert lens[0][2] == (6, 32, D)  # B*V rows at the fixed training bucket
    snap = c.telemetry.snapshot()["calls"]
    assert snap["totals"]["lensnet"]["train"] == {"calls": 1, "rows": 6, "entries": 6 * 32}


def test_inference_calls_use_allocator_helper_and_padded_gist_buckets():
    log: list = []
    c = _mock_controller(log)
    c.begin_session(_prompt(150))
    c.refocus()
    gist_shapes = {e[2][0] for e in log if e[0] == "gistnet"}
    assert gist_shapes <= set(c.cfg.mc.gist_bucket_ladder)  # always padded to a bucket
    lens = [e for e in log if e[0] == "lensnet"]
    assert lens and all(e[1][1][1] == "_lensnet_allocator_scores" for e in lens)
    assert all(e[2][0] == 1 and e[2][1] in c.cfg.mc.bucket_ladder for e in lens)


def _clone_delta(c: MCController, net: str, ctx: str, fn):
    t = c.telemetry.counters
    calls0, clones0 = t.totals[net][ctx]["calls"], t.clones[net][ctx]
    out = fn()
    return out, t.totals[net][ctx]["calls"] - calls0, t.clones[net][ctx] - clones0


def test_helpers_return_a_clone_never_the_raw_output_and_clone_once_per_call():
    log: list = []
    c = _mock_controller(log)
    gist, lens = c.gistnet, c.lensnet
    cases = [
        ("gistnet", "inference", gist, lambda: c.gist_blocks(torch.randn(3, K, D)), 1),  # pads 3 -> 4
        ("gistnet", "train", gist, lambda: c.gist_blocks(torch.randn(32, K, D), train=True), 1),
        ("gistnet", "inference", gist, lambda: c.gist_blocks(torch.randn(40, K, D)), 3),  # 16+16+8->16
        ("lensnet", "inference", lens, lambda: c.lensnet_scores(random_mwc(32, 20, 0, "cpu"), 90), 1),
        ("lensnet", "train", lens, lambda: c._run_lensnet_batched(
            torch.randn(6, 32, D), torch.ones(6, 32, dtype=torch.bool), torch.arange(32.).repeat(6, 1),
            torch.zeros(6, 32, dtype=torch.long), torch.full((6,), 64.)), 1),
    ]
    for net, ctx, mod, fn, n_calls in cases:
        mod.raw_ptrs.clear()
        out, d_calls, d_clones = _clone_delta(c, net, ctx, fn)
        assert d_calls == n_calls and d_clones == n_calls, f"{net}/{ctx}: {d_calls} calls, {d_clones} clones"
        assert len(mod.raw_ptrs) == n_calls
        assert out.data_ptr() not in mod.raw_ptrs, f"{net}/{ctx} returned the module's raw output"
    # the padded GistNet call returns exactly the real rows, and the values are the module's
    blocks = torch.randn(3, K, D)
    out = c.gist_blocks(blocks)
    torch.testing.assert_close(out, blocks.mean(1) * gist.scale.detach())
    # training clones keep autograd: the LensNet parameter gets a gradient through the clone
    scores = cases[-1][3]()
    scores.sum().backward()
    assert lens.scale.grad is not None and lens.scale.grad.abs() > 0


# ----------------------------------------------------------------------------- 2. step marks
@pytest.fixture
def mark_log(monkeypatch):
    """A counting fake of torch.compiler.cudagraph_mark_step_begin; marks land in the same log."""
    log: list = []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: log.append(("MARK",)))
    return log


def _force_marks(c: MCController) -> None:
    """Pretend CUDA graphs are on (StepMarker(active=True)) so marks really call the fake."""
    c.marker = StepMarker([c.compiled_gistnet, c.compiled_lensnet], c.telemetry, active=True)


def _seq(log: list) -> list[str]:
    return [{"MARK": "M", "gistnet": "G", "lensnet": "L"}[e[0]] for e in log]


def test_step_marks_have_one_owner_and_the_expected_counts(mark_log):
    c = _mock_controller(mark_log)
    _force_marks(c)
    # training: G G L (forward), backward, then exactly one mark: never between forward and backward
    for i in range(3):
        mark_log.clear()
        _train_micro_step(c, seed=i)
        assert _seq(mark_log) == ["G", "G", "L", "M"]
    counters = c.telemetry.counters
    assert counters.mark_requests == {"after backward": 3}
    # inference: a mark right before every net call (the previous outputs were already cloned)
    mark_log.clear()
    c.begin_session(_prompt(150))
    for _ in range(5):
        c.refocus()
    for _ in range(7):  # allocator-style repeated calls
        c.lensnet_scores(c.session.materialize(), c.session.num_tokens)
    seq = _seq(mark_log)
    assert seq[0::2] == ["M"] * (len(seq) // 2) and "M" not in seq[1::2] and len(seq) % 2 == 0
    tot = counters.totals
    assert counters.mark_requests["allocator iteration"] == tot["lensnet"]["inference"]["calls"] >= 5 + 7
    assert counters.mark_requests["gistnet inference call"] == tot["gistnet"]["inference"]["calls"] > 0
    assert counters.mark_requests["after backward"] == 3
    n_marks = sum(counters.mark_requests.values())
    assert counters.marks == n_marks == 3 + seq.count("M")


def test_marks_are_counted_but_not_issued_without_cuda_graphs(mark_log):
    c = _mock_controller(mark_log)  # eager on CPU: the marker is inactive
    assert not c.marker.active and not c.cudagraphs_possible
    _train_micro_step(c)
    c.begin_session(_prompt(60))
    c.refocus()
    counters = c.telemetry.counters
    assert "MARK" not in _seq(mark_log) and counters.marks == 0
    assert counters.mark_requests["after backward"] == 1
    assert counters.mark_requests["allocator iteration"] == counters.totals["lensnet"]["inference"]["calls"]


def test_zero_grad_keeps_grads_allocated_only_when_cuda_graphs_can_run(mark_log):
    c = _mock_controller(mark_log)
    opt = torch.optim.SGD(c.aux_parameters(), lr=0.1)
    _train_micro_step(c)
    c.zero_grad(opt)
    assert all(p.grad is None for p in c.aux_parameters())  # eager: freed
    _force_marks(c)
    _train_micro_step(c)
    ptrs = [p.grad.data_ptr() for p in c.aux_parameters()]
    c.zero_grad(opt)
    assert all(p.grad is not None and not p.grad.any() for p in c.aux_parameters())
    assert [p.grad.data_ptr() for p in c.aux_parameters()] == ptrs  # zeroed in place, same storage


def test_warmup_allocates_grads_outside_the_graph_pool_before_the_first_backward(mark_log):
    """With CUDA graphs possible, .grad exists before warm-up's first compiled backward (so no grad is
    a graph-pool tensor) and stays the same storage, zeroed in place, afterwards."""
    c = _mock_controller(mark_log)
    _force_marks(c)
    c.cfg.compile.lensnet.train = "default"  # selects warm-up's training branch; the nets stay eager (built at init)
    seen: list = []
    orig = c.compiled_gistnet.run

    def spy(*args, **kwargs):
        if not seen:
            seen.append([None if p.grad is None else p.grad.data_ptr() for p in c.aux_parameters()])
        return orig(*args, **kwargs)

    c.compiled_gistnet.run = spy
    c.warmup()
    assert seen and None not in seen[0], "a parameter had no .grad when the first compiled forward ran"
    assert [p.grad.data_ptr() for p in c.aux_parameters()] == seen[0]
    assert all(not p.grad.any() for p in c.aux_parameters())
    assert c.telemetry.counters.mark_requests["after backward"] == c.cfg.compile.warmup_iters


def test_every_micro_step_allocates_missing_grads_before_the_nets_run(mark_log):
    """Without warm-up (the bench's train step) and after a zero_grad(set_to_none=True) by hand, a micro-step
    under CUDA graphs still gives every parameter its .grad before GistNet runs: a grad that a compiled backward
    allocated would be a graph-pool tensor (on the first H100 run the bench's train step failed so)."""
    c = _mock_controller(mark_log)
    _force_marks(c)
    seen: list = []
    orig = c.compiled_gistnet.run

    def spy(*args, **kwargs):
        seen.append(all(p.grad is not None for p in c.aux_parameters()))
        return orig(*args, **kwargs)

    c.compiled_gistnet.run = spy
    for _ in range(2):
        for p in c.aux_parameters():
            p.grad = None
        _train_micro_step(c)
    assert seen and all(seen)
    with torch.no_grad():  # an evaluation forward allocates nothing
        for p in c.aux_parameters():
            p.grad = None
        c.train_step(torch.randint(0, 256, (c.cfg.train.stage2.batch_size, c.cfg.mc.history_tokens)),
                     torch.Generator().manual_seed(0))
    assert all(p.grad is None for p in c.aux_parameters())


def test_warmup_with_everything_off_runs_and_does_not_freeze():
    c = _mock_controller([])
    snap = c.warmup()  # nothing compiles: no monitor, so nothing to freeze (used to raise)
    assert c.warmed_up and "compile" not in snap


# ----------------------------------------------------------------------------- 4. held outputs
def test_held_outputs_survive_later_calls_eager():
    c = _real_controller()
    a = c.lensnet_scores(random_mwc(32, 29, 10, "cpu"), 200)
    a_snap = a.clone()
    for i, size in enumerate((16, 32, 32)):
        c.lensnet_scores(random_mwc(size, size - 3, 11 + i, "cpu"), 100)
    torch.testing.assert_close(a, a_snap, rtol=0, atol=0)
    g = torch.Generator().manual_seed(3)
    blocks = torch.randn(16, K, D, generator=g)
    ga = c.gist_blocks(blocks)
    ga_snap = ga.clone()
    for n in (1, 4, 16):
        c.gist_blocks(torch.randn(n, K, D, generator=g))
    torch.testing.assert_close(ga, ga_snap, rtol=0, atol=0)
    torch.testing.assert_close(ga, c.gistnet(blocks).detach(), rtol=1e-6, atol=1e-6)  # consumed faithfully


# ----------------------------------------------------------------------------- 5. re-entrance
def _batched_inputs(rows: int = 6, w: int = 32):
    return (torch.randn(rows, w, D), torch.ones(rows, w, dtype=torch.bool), torch.arange(float(w)).repeat(rows, 1),
            torch.zeros(rows, w, dtype=torch.long), torch.full((rows,), 64.0))


@pytest.mark.parametrize("helper", ["_lensnet_allocator_scores", "_run_lensnet_batched"])
def test_reentrance_from_backward_hook_is_reported_raises_and_never_marks(mark_log, helper):
    c = _real_controller()
    _force_marks(c)
    c.begin_session(_prompt(80))
    mwc, n_tok = c.session.materialize(), c.session.num_tokens
    ctx = "inference" if helper == "_lensnet_allocator_scores" else "train"
    gen = torch.Generator().manual_seed(0)
    out = c.train_step(torch.randint(0, 256, (2, 64), generator=gen), gen)

    def hook(grad):  # LensNet from inside the backward: forbidden
        if helper == "_lensnet_allocator_scores":
            c.lensnet_scores(mwc, n_tok)
        else:
            c._run_lensnet_batched(*_batched_inputs())
        return grad

    out.total.register_hook(hook)
    counters = c.telemetry.counters
    marks0, requests0, calls0 = len(mark_log), dict(counters.mark_requests), counters.totals["lensnet"][ctx]["calls"]
    with pytest.raises(RuntimeError, match=rf"re-entrant call of lensnet \({ctx}\): inside autograd backward"):
        out.total.backward()
    events = c.telemetry.snapshot()["calls"]["reentrance"]
    assert len(events) == 1
    assert events[0]["net"] == "lensnet" and events[0]["context"] == ctx and events[0]["action"] == "raised"
    assert "_current_graph_task_id" in events[0]["reason"]
    assert len(mark_log) == marks0 and counters.mark_requests == requests0  # no mark from inside the backward
    assert counters.totals["lensnet"][ctx]["calls"] == calls0  # the call never reached the net
    # the boundary is clean afterwards: a normal micro-step works and marks once
    _train_micro_step(c, seed=5)
    assert counters.mark_requests["after backward"] == requests0.get("after backward", 0) + 1


def test_reentrance_record_policy_proceeds_but_still_reports_and_does_not_mark(mark_log):
    c = _real_controller()
    _force_marks(c)
    c.compiled_lensnet.reentrance = "record"
    c.begin_session(_prompt(80))
    mwc, n_tok = c.session.materialize(), c.session.num_tokens
    gen = torch.Generator().manual_seed(0)
    out = c.train_step(torch.randint(0, 256, (2, 64), generator=gen), gen)
    seen = []
    out.total.register_hook(lambda g: seen.append(c.lensnet_scores(mwc, n_tok)) or g)
    marks0 = len(mark_log)
    out.total.backward()
    assert len(seen) == 1 and seen[0].shape == (mwc.bucket,)
    events = c.telemetry.snapshot()["calls"]["reentrance"]
    assert [(e["net"], e["action"]) for e in events] == [("lensnet", "recorded only")]
    assert len(mark_log) == marks0
    assert "REENTRANCE x1" in c.telemetry.debug_line(c.telemetry.end_step())


@pytest.mark.parametrize("on", [False, True])
def test_lens_trains_gist_decides_whether_lensnet_losses_reach_gistnet(on):
    """mc.lens_trains_gist: off, LensNet's preference loss leaves GistNet without gradient (its input is
    detached); on, the same loss reaches every GistNet parameter, through the gists LensNet reads."""
    cfg = tiny_config("off")
    cfg.mc.lens_trains_gist = on
    c = _real_controller(cfg)
    gist, lens = c.gistnet, c.lensnet
    gen = torch.Generator().manual_seed(0)
    out = c.train_step(torch.randint(0, 256, (2, 64), generator=gen), gen)
    assert out.preference.active_pairs.item() > 0, "no active preference pair: the test would prove nothing"
    out.preference.loss.backward()  # the LensNet loss alone, not the LM loss that trains GistNet anyway
    grads = [p.grad for p in gist.parameters()]
    if on:
        assert all(g is not None and g.abs().sum() > 0 for g in grads)
    else:
        assert all(g is None or g.abs().sum() == 0 for g in grads)
    assert all(p.grad is not None for p in lens.parameters() if p.requires_grad)


def test_content_loss_adds_to_the_stage2_total_and_trains_the_content_head():
    """gistnet.content_loss_weight > 0: GistNet gets a content head (absent at 0), the step's total grows by
    the weighted content loss, and the head gets gradient from the total."""
    cfg = tiny_config("off")
    base, gist_off, lens = build_nets(cfg, torch.device("cpu"))
    assert gist_off.content_head is None
    totals = {}
    for w in (0.0, 0.5):
        cfg.gistnet.content_loss_weight = w
        c = _real_controller(cfg)
        gist = c.gistnet
        gen = torch.Generator().manual_seed(0)
        out = c.train_step(torch.randint(0, 256, (2, 64), generator=gen), gen)
        totals[w] = float(out.total.detach())
        if w:
            out.total.backward()
            assert gist.content_head.weight.grad.abs().sum() > 0
    assert totals[0.5] > totals[0.0] + 1.0  # the content loss at init is ~0.69 per vocabulary item
