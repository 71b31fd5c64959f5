"""Distributed training (torchrun + DDP, Gloo on CPU): batch arithmetic, shards, equivalence with
one process, and the workflow's --nproc path with a rank killed mid-run (obsidian "Distributed training")."""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import torch

from _subproc import ROOT, subprocess_env
from mc.build import build_controller
from mc.compile.telemetry import Telemetry
from mc.config import CompileConfig, ConfigError, DataConfig, RecallConfig
from mc.nets.gpt import GPT, next_token_loss
from mc.train.checkpoint import load_checkpoint
from mc.train.common import make_sampler, read_metrics
from mc.train.distributed import Dist, local_config, per_rank_batch
from mc.train.launch import dies_with_parent, run_distributed
from mc.train.optim import lr_at, make_optimizer, set_lr, stage1_cap
from mc.train.stage2 import DATA_SEED_OFFSET
from test_train import tiny_cfg

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the dead-rank watchdog and the kill test read Linux /proc"),
    pytest.mark.skipif(not (torch.distributed.is_available() and torch.distributed.is_gloo_available()),
                       reason="this torch build has no torch.distributed Gloo backend (the CPU DDP tests need it)"),
]


def test_per_rank_batch_keeps_the_global_batch():
    assert per_rank_batch(8, 4, 2) == (8, 2)  # accumulation split first: the micro-batch (memory) is unchanged
    assert per_rank_batch(2, 1, 2) == (1, 1)
    assert per_rank_batch(6, 2, 4) == (3, 1)
    assert per_rank_batch(4, 3, 2) == (3, 2)
    for b, a, w in [(8, 4, 2), (2, 1, 2), (6, 2, 4), (4, 3, 2), (5, 2, 1)]:
        micro, accum = per_rank_batch(b, a, w)
        assert micro * accum * w == b * a and micro <= b
    with pytest.raises(ConfigError, match="multiple of --nproc 2"):
        per_rank_batch(3, 1, 2)
    cfg = tiny_cfg()
    cfg.train.stage1 = dataclasses.replace(cfg.train.stage1, batch_size=6, grad_accum=1)
    local = local_config(cfg, 2)
    assert (local.train.stage1.batch_size, local.train.stage1.grad_accum) == (3, 1)
    assert (local.train.stage2.batch_size, local.train.stage2.grad_accum) == (2, 1)
    assert local_config(cfg, 1) is cfg


def test_rank_shards_are_disjoint_and_reproducible():
    cfg = tiny_cfg()
    cfg.data = DataConfig(source="stdlib", recall_mix=0.5, recall=RecallConfig(doc_tokens=64, n_records=1, key_len=2,
                                                                                value_len=2))
    base = make_sampler(cfg, "train", 64, max_files=12)
    shards = [Dist(rank=r, world=2).shard(base) for r in range(2)]
    keys = [set(s.corpus.docs.keys) for s in shards]
    assert keys[0] and keys[1] and not keys[0] & keys[1] and keys[0] | keys[1] == set(base.corpus.docs.keys)
    assert Dist().shard(base) is base  # one process: the sampler itself
    docs = [s.recall.sample_docs(16, 64, torch.Generator().manual_seed(5)).ids for s in shards]
    assert not {tuple(r.tolist()) for r in docs[0]} & {tuple(r.tolist()) for r in docs[1]}
    again = shards[1].recall.sample_docs(16, 64, torch.Generator().manual_seed(5)).ids
    assert torch.equal(docs[1], again)


def test_nproc_flag_gate_inputs_and_an_uneven_batch(tmp_path, capsys):
    from mc.app.workflow import harness_argv, main
    from mc.config_loading import compile_hash, load_config, parse_workflow_args
    from mc.train.launch import gate_inputs, workflow_runners

    args = parse_workflow_args(["--preset", "smoke", "--nproc", "2"])
    assert args.nproc == 2 and parse_workflow_args(["--preset=smoke"]).nproc == 0
    for bad in ("0", "two", "-1"):
        with pytest.raises(ConfigError, match="--nproc"):
            parse_workflow_args([f"--nproc={bad}"])
    cfg = tiny_cfg()  # stage1 2 x 1, stage2 2 x 2 global
    gcfg, gargs = gate_inputs(cfg, args)  # the gate checks the shapes a rank runs: 2 x 2 -> 2 x 1, 2 x 1 -> 1 x 1
    assert (gcfg.train.stage2.batch_size, gcfg.train.stage2.grad_accum, gcfg.train.stage1.batch_size) == (2, 1, 1)
    assert {"train.stage2.grad_accum=1", "train.stage1.batch_size=1"} <= set(gargs.overrides)
    assert gate_inputs(cfg, parse_workflow_args([])) == (cfg, parse_workflow_args([]))
    # the harness, given the gate's arguments, resolves the per-rank config: its verdict matches the gate's hash
    args = parse_workflow_args(["--preset=h100", "--nproc=4", "--mc_compile_lensnet=1", "train.device=cpu"])
    gcfg, gargs = gate_inputs(load_config(args.hydra_overrides()), args)
    harness_cfg = load_config(parse_workflow_args(harness_argv(gargs)).hydra_overrides())
    assert compile_hash(harness_cfg) == compile_hash(gcfg) and harness_cfg.train.stage2.batch_size == 4  # 8 x 2 on 4
    assert set(workflow_runners(2)) == {"stage1", "stage2"} and workflow_runners(0) == {}
    # smoke's stage-2 global batch (2 x 1) cannot split over 3 ranks: exit 2 before anything is written
    assert main(["--preset=smoke", "--nproc=3", "--dry-run", f"out_dir={tmp_path}"]) == 2
    assert "cannot be split evenly over 3 ranks" in capsys.readouterr().err and not any(tmp_path.iterdir())


def test_resume_rng_per_rank_and_on_another_number_of_ranks(capsys):
    from mc.train.checkpoint import rng_state

    states = [rng_state(torch.Generator().manual_seed(s)) for s in (10, 11)]
    saved = {"rng": states[0], "rng_ranks": states, "step": 5}
    for rank in (0, 1):  # same world size: each rank continues its own generator exactly
        gen = torch.Generator()
        Dist(rank=rank, world=2).restore_rng(saved, gen, seed=7)
        assert torch.equal(gen.get_state(), states[rank]["data"])
    assert capsys.readouterr().err == ""
    one = torch.Generator()  # 2 ranks -> 1 process: rank 0's state, and a note that the order differs
    Dist(rank=0, world=1).restore_rng(saved, one, seed=7)
    assert torch.equal(one.get_state(), states[0]["data"]) and "data order differs" in capsys.readouterr().err
    gen = torch.Generator()  # 1 process -> 2 ranks: rank 1 reseeds from (seed, rank, step), reproducibly
    Dist(rank=1, world=2).restore_rng({"rng": states[0], "step": 5}, gen, seed=7)
    assert torch.equal(gen.get_state(), torch.Generator().manual_seed(Dist(rank=1, world=2).data_seed(7) + 5).get_state())


# ----------------------------------------------------------------------------- DDP == one process
def _reference_stage2(cfg, run_dir: Path, world: int) -> dict[str, torch.Tensor]:
    """One process over the same global batch: every rank's shard and micro-batches, in turn, with the
    loss scaled by 1/(world * accum), which is the mean DDP's all-reduce forms."""
    st, local = cfg.train.stage2, local_config(cfg, world).train.stage2
    ctrl = build_controller(local_config(cfg, world), device=torch.device("cpu"),
                            base_weights=run_dir / "stage1" / "base.pt", telemetry=Telemetry())
    ctrl.gistnet.train()
    ctrl.lensnet.train()
    opt = make_optimizer(ctrl.aux_parameters(), st)
    shards = []
    for r in range(world):
        d = Dist(rank=r, world=world)
        shards.append((d.shard(make_sampler(cfg, "train", cfg.mc.history_tokens)),
                       torch.Generator().manual_seed(d.data_seed(cfg.train.seed + DATA_SEED_OFFSET))))
    groups = [list(ctrl.gistnet.parameters()), list(ctrl.lensnet.parameters())]
    for step in range(st.steps):
        set_lr(opt, lr_at(step, st))
        for sampler, gen in shards:
            for _ in range(local.grad_accum):
                out = ctrl.train_step(sampler.sample(local.batch_size, cfg.mc.history_tokens, gen).tokens, gen)
                (out.total / (local.grad_accum * world)).backward()
                ctrl.end_micro_step()
        for g in groups:
            torch.nn.utils.clip_grad_norm_(g, 1.0)
        opt.step()
        ctrl.zero_grad(opt)
    return {f"{net}.{k}": v for net, sd in ctrl.state_dict().items() for k, v in sd.items()}


def _stage2_ddp_vs_one_process(cfg, tmp_path, monkeypatch, tol: float) -> dict:
    """Stage 2 on 2 Gloo ranks (torchrun), then the one-process reference (eager); rank 0's summary."""
    torch.manual_seed(0)
    (tmp_path / "stage1").mkdir()
    torch.save(GPT(cfg.model).state_dict(), tmp_path / "stage1" / "base.pt")
    for k, v in subprocess_env(MC_PROGRESS="0").items():
        monkeypatch.setenv(k, v)
    summary = run_distributed("stage2", cfg, tmp_path, 2)
    assert summary["steps"] == cfg.train.stage2.steps and [r["rank"] for r in summary["ranks"]] == [0, 1]
    assert all(rec["world_size"] == 2 for rec in read_metrics(tmp_path / "stage2" / "metrics.jsonl"))
    ckpt = load_checkpoint(tmp_path / "stage2" / "ckpt.pt")
    assert ckpt["world_size"] == 2 and len(ckpt["rng_ranks"]) == 2
    ddp = {f"{net}.{k}": v for net, sd in ckpt["controller"].items() for k, v in sd.items()}
    eager = dataclasses.replace(cfg, compile=CompileConfig())  # the reference runs eagerly in this process
    ref = _reference_stage2(eager, tmp_path, 2)
    init = build_controller(eager, device=torch.device("cpu"), telemetry=Telemetry()).state_dict()
    moved = max(float((ref[k] - v).abs().max()) for net, sd in init.items() for k2, v in sd.items()
                for k in [f"{net}.{k2}"])
    assert moved > 1e-3, "the reference did not train: the comparison would be vacuous"
    worst = max(float((ddp[k] - ref[k]).abs().max()) for k in ref)
    assert ddp.keys() == ref.keys() and worst < tol, f"DDP weights differ from one process by {worst:.2e}"
    return summary


def _stage2_cfg():
    cfg = tiny_cfg(s2_steps=3)
    # global batch 4 = 2 ranks x (micro-batch 1 x 2 micro-steps): exercises no_sync on the first micro-step
    cfg.train.stage2 = dataclasses.replace(cfg.train.stage2, batch_size=1, grad_accum=4, eval_every=100, ckpt_every=2)
    return cfg


def test_stage2_under_ddp_equals_one_process_over_the_same_global_batch(tmp_path, monkeypatch):
    _stage2_ddp_vs_one_process(_stage2_cfg(), tmp_path, monkeypatch, tol=1e-5)


@pytest.mark.slow  # ~50 s with a cold Inductor cache (two ranks compile at once on 2 cores), ~10 s warm
def test_compiled_stage2_under_ddp_keeps_zero_recompiles_per_rank(tmp_path, monkeypatch):
    """LensNet compiled for training (Inductor "default"; one graph keeps the test short), freeze=fail,
    under DDP: each rank warms up, then trains and (rank 0) evaluates with no compile, recompile or graph
    break, and the weights still match the eager one-process run (Inductor's kernels round differently)."""
    cfg = _stage2_cfg()
    cfg.train.stage2 = dataclasses.replace(cfg.train.stage2, eval_every=2)  # rank 0 evaluates mid-run, compiled
    cfg.compile.lensnet.train = "default"
    summary = _stage2_ddp_vs_one_process(cfg, tmp_path, monkeypatch, tol=1e-4)
    for rank in summary["ranks"]:
        assert rank["compiled"] and rank["phase"] == "steady", rank
        assert rank["warmup"]["compiles"] > 0 and rank["warmup"]["graph_breaks"] == 0, rank
        assert rank["steady"] == {"compiles": 0, "recompiles": 0, "graph_breaks": 0}, rank


def _reference_stage1(cfg, world: int) -> dict[str, torch.Tensor]:
    """Stage 1 in one process over the same global batch (every rank's shard, loss / (world * accum))."""
    st, local = cfg.train.stage1, local_config(cfg, world).train.stage1
    torch.manual_seed(cfg.train.seed)
    model = GPT(cfg.model)
    model.train()
    opt = make_optimizer(model.parameters(), st)
    shards = [(Dist(rank=r, world=world).shard(make_sampler(cfg, "train", cfg.model.max_seq_len)),
               torch.Generator().manual_seed(Dist(rank=r, world=world).data_seed(cfg.train.seed))) for r in range(world)]
    for step in range(stage1_cap(st)):  # with the copy gate (never met here) to its cap
        set_lr(opt, lr_at(step, st))
        for sampler, gen in shards:
            for _ in range(local.grad_accum):
                ids = sampler.sample(local.batch_size, cfg.model.max_seq_len, gen).tokens
                (next_token_loss(model(ids), ids) / (local.grad_accum * world)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return model.state_dict()


@pytest.mark.parametrize("gate", [False, True])
def test_stage1_under_ddp_equals_one_process_over_the_same_global_batch(tmp_path, monkeypatch, gate):
    """With the copy gate on (a target no base reaches), rank 0 measures and both ranks train on together to the
    cap: a rank that stopped alone would leave the other waiting in a collective until the timeout."""
    cfg = tiny_cfg(s1_steps=3)
    cfg.train.stage1 = dataclasses.replace(cfg.train.stage1, batch_size=1, grad_accum=4, eval_every=100, ckpt_every=2,
                                           **({"query_loss_target": 1e-9, "max_steps_factor": 1.7} if gate else {}))
    for k, v in subprocess_env(MC_PROGRESS="0").items():
        monkeypatch.setenv(k, v)
    summary = run_distributed("stage1", cfg, tmp_path, 2)
    assert summary["steps"] == (5 if gate else 3)
    assert ("copy_gate" in summary) == gate and (not gate or summary["copy_gate"]["met"] is False)
    assert all(rec["world_size"] == 2 for rec in read_metrics(tmp_path / "stage1" / "metrics.jsonl"))
    ddp = load_checkpoint(tmp_path / "stage1" / "base.pt")
    ref = _reference_stage1(cfg, 2)
    torch.manual_seed(cfg.train.seed)
    init = GPT(cfg.model).state_dict()
    assert max(float((ref[k] - init[k]).abs().max()) for k in ref) > 1e-3, "the reference did not train"
    worst = max(float((ddp[k] - ref[k]).abs().max()) for k in ref)
    assert ddp.keys() == ref.keys() and worst < 1e-5, f"DDP weights differ from one process by {worst:.2e}"


# ----------------------------------------------------------------------------- workflow --nproc, kill, resume
def _descendants_with(tag: str, rank: str) -> list[int]:
    """Pids of processes whose environment carries ``tag`` and ``RANK=rank`` (the torchrun workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"MC_TEST_TAG={tag}".encode() in env and f"RANK={rank}".encode() in env:
            found.append(int(entry.name))
    return found


def _workflow(tmp_path: Path, tag: str, *extra: str) -> subprocess.Popen:
    args = [sys.executable, "-m", "mc.app.workflow", "--preset=smoke", "--nproc=2", "--name=ddp_smoke",
            "--stages=env,stage1,stage2", f"out_dir={tmp_path}", "train.device=cpu", "data.source=recall",
            "telemetry.jsonl=false", "train.dist_timeout_s=30", "train.stage1.steps=2", "train.stage1.eval_every=2",
            "train.stage2.ckpt_every=2", "train.stage2.eval_every=1000", *extra]
    return subprocess.Popen(args, cwd=str(ROOT), env=subprocess_env(MC_PROGRESS="0", MC_TEST_TAG=tag),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


STEPS = 60  # stage-2 steps of the killed run and of its resume


_PARENT = """
import subprocess, sys, time
from mc.train.launch import dies_with_parent
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], preexec_fn=dies_with_parent())
print(child.pid, flush=True)
time.sleep(120)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only (None elsewhere)")
def test_a_launched_child_dies_with_a_killed_launcher():
    """The torchrun the workflow starts gets SIGTERM when the workflow is SIGKILLed (torchrun then stops its ranks):
    here a stand-in child of a stand-in launcher."""
    assert callable(dies_with_parent())
    parent = subprocess.Popen([sys.executable, "-c", _PARENT], stdout=subprocess.PIPE, text=True, env=subprocess_env())
    child = int(parent.stdout.readline())
    try:
        os.kill(child, 0)  # alive before the kill
        parent.kill()
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                break
            if Path(f"/proc/{child}/stat").read_text().split()[2] == "Z":  # exited, not yet reaped (by init)
                break
            time.sleep(0.1)
        else:
            pytest.fail("the child outlived its killed launcher by 10 s")
    finally:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_workflow_nproc2_survives_a_killed_rank_and_resumes(tmp_path):
    tag = uuid.uuid4().hex
    run = tmp_path / "ddp_smoke"
    proc = _workflow(tmp_path, tag, f"train.stage2.steps={STEPS}")  # ~0.1 s a step: the kill lands mid-run
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and proc.poll() is None:
            recs = read_metrics(run / "stage2" / "metrics.jsonl") if (run / "stage2" / "ckpt.pt").exists() else []
            if recs and recs[-1]["step"] >= 3:
                break
            time.sleep(0.2)
        assert proc.poll() is None, f"the run ended before the kill:\n{proc.communicate()[0][-3000:]}"
        victims = _descendants_with(tag, "1")
        assert victims, "rank 1's process was not found"
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        out = proc.communicate(timeout=60)[0]
        waited = time.monotonic() - killed_at
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, out[-3000:]
    assert waited < 30, f"the surviving rank took {waited:.0f} s to exit (timeout 30 s)"
    assert "[mc rank 0/2] rank 1 (pid" in out and "died" in out, out[-3000:]
    assert "re-run the same command (--nproc 2)" in out
    ckpt_step = load_checkpoint(run / "stage2" / "ckpt.pt")["step"]
    assert ckpt_step >= 2 and ckpt_step % 2 == 0
    assert json.loads((run / "stage1" / "summary.json").read_text())["steps"] == 2

    proc = _workflow(tmp_path, tag, f"train.stage2.steps={STEPS}")  # the same command resumes
    out = proc.communicate(timeout=150)[0]
    assert proc.returncode == 0, out[-4000:]
    assert "stage1: skipped" in out
    recs = read_metrics(run / "stage2" / "metrics.jsonl")
    assert f"resuming from step {ckpt_step} of {STEPS}" in out
    assert [r["step"] for r in recs] == list(range(1, STEPS + 1)), "resume redid or skipped steps"
    assert all(r["world_size"] == 2 for r in recs)
    assert all(r["world_size"] == 2 for r in read_metrics(run / "stage1" / "metrics.jsonl"))
    assert json.loads((run / "stage2" / "summary.json").read_text())["steps"] == STEPS
