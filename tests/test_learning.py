"""Does the system learn? A short stage 1 + stage 2 on tiny nets, on the generated recall task.

Measured on held-out (val-split) recall documents, after ``train_stage1`` + ``train_stage2``:

* **ranking**: in the recency-baseline working context of each document, LensNet's score of the
  entry holding the queried record's value vs the median score over the working context; the
  rate of documents where it is above the median must be a clear majority;
* **refocus acts on it**: after ``controller.refocus()`` the queried value is back at LOD0;
* **focus helps**: the loss of the value tokens (the answer) and of the shared 16-token tail, in
  the LensNet-focused working context (``begin_session`` + ``refocus``) vs the recency baseline
  (the same session before refocusing), averaged over the documents.

The same measurements on the *untrained* aux nets (fresh GistNet/LensNet over the same base) are
printed as the chance reference. Numbers are printed and written to ``learning_metrics.json``
in the test's run folder; obsidian [[Training]] ("The learning test") records the values measured on
seeds 0-2 under three CPU kernel sets, and why each assertion's bar sits where it does.

Geometry: 64-token documents with one record ``KY=VAL`` in the first 40% and the query
``\\nKY=VAL`` at the end; K=8, one gist level, a 16-token recent tail and a 36-entry budget. The
recency baseline keeps the record blocks as gists, so the base can only copy the value when
something expands them. One record (not several): a 2-layer base learns the plain copy within a CPU
test's budget, matching one key among two it did not.

The recipe is the ``cpu`` preset's, because the bare one (random variants only, a z-score allocator)
passed on one machine and failed on another: with ``ATEN_CPU_CAPABILITY`` set to ``default``,
``avx2`` and ``avx512`` (three sets of float kernels, a stand-in for other CPUs) LensNet sometimes
learnt a recency prior and ranked the record *last* (above-median rate 0%), and the allocator left
top-ranked gists unexpanded when their z-score stayed under ``expand_z`` (value at LOD0 in 0-44% of
documents with the ranking right). Guided variants + the focus loss teach the ranking on all nine
seed x kernel runs; ``expand_top=1`` makes the allocator act on the ranking alone.
"""
from __future__ import annotations

import json
import os
import statistics
import time

import pytest
import torch

from mc.build import build_controller, resolve_device
from mc.config import (AllocatorConfig, AllocatorInferenceConfig, DataConfig, EvalConfig, GistNetConfig, LensNetConfig,
                       MCConfig, ModelConfig, RecallConfig, RunConfig, StageConfig, TelemetryConfig, TrainConfig)
from mc.data.loader import RecallSource
from mc.nets.gpt import next_token_loss
from mc.nets.losses import tail_loss_mask
from mc.train.checkpoint import load_checkpoint
from mc.data.recall import fit_recall
from mc.train.stage1 import train_stage1
from mc.train.stage2 import train_stage2

T = 64
N_DOCS = 64
# Stage 1: the 2-layer base learns the copy in a sudden transition whose step depends on the seed *and on
# the CPU's float kernels*: the exact 3-digit copy with full context after 700 steps was 98% / 41% / 100%
# (seeds 0 / 1 / 2) with ATEN_CPU_CAPABILITY=default, 100% / 6% / 100% with avx2, and seed 1 at 1000
# steps 0% with avx512; with 1500 steps stage 2 finds a copying base on every seed x kernel set.
# Stage 2 needs ~100 steps.
STAGE1_STEPS = 1500
STAGE2_STEPS = 150
# The seed of the CI run; MC_LEARNING_SEEDS="0,1,2" runs the test once per seed (how the margins below
# were measured: obsidian Training, "Learning test across seeds").
SEEDS = [int(x) for x in os.environ.get("MC_LEARNING_SEEDS", "0").split(",")]


def learning_cfg() -> RunConfig:
    return RunConfig(
        model=ModelConfig(d_model=64, n_layers=2, n_heads=4, max_seq_len=T),
        gistnet=GistNetConfig(d_model=32, n_layers=1, n_heads=2),
        lensnet=LensNetConfig(d_model=32, n_layers=2, n_heads=2),
        mc=MCConfig(block_size=8, max_lod=1, max_entries=36, recent_tokens=16, bucket_ladder=[40],
                    gist_bucket_ladder=[1, 8], history_tokens=T, n_random_variants=3,
                    guided_variants=2, focus_loss_weight=1.0, pref_beta=2.0),
        allocator=AllocatorConfig(expand_threshold=0.2, collapse_threshold=0.2, cooldown=2, expand_top=1,
                                  inference=AllocatorInferenceConfig(iterations=3, max_edits=4, refocus_interval=32)),
        data=DataConfig(source="recall", recall=RecallConfig(doc_tokens=T, n_records=1, key_len=2, value_len=3,
                                                              records_region=0.4)),
        eval=EvalConfig(tail_tokens=16),
        train=TrainConfig(
            device="cpu", seed=0,
            stage1=StageConfig(steps=STAGE1_STEPS, batch_size=64, lr=5e-3, warmup_steps=20, eval_every=1000,
                               eval_batches=1, ckpt_every=1000),
            stage2=StageConfig(steps=STAGE2_STEPS, batch_size=8, grad_accum=1, lr=3e-3, warmup_steps=10,
                               eval_every=1000, eval_batches=1, ckpt_every=1000)),
        telemetry=TelemetryConfig(jsonl=False),
    )


def _tail_loss(ctrl, session, tail: int) -> float:
    """Next-token loss over the last ``tail`` entries (all LOD0) of the session's working context."""
    mwc = session.materialize()
    logits = ctrl.base_logits(mwc.embeds[None], mwc.positions[None], mwc.lods[None], mwc.mask[None])
    mask = tail_loss_mask(torch.tensor([mwc.length]), mwc.bucket, tail)
    return float(next_token_loss(logits, mwc.token_ids[None], mask))


@torch.no_grad()
def measure(ctrl, cfg: RunConfig) -> dict:
    src = RecallSource(fit_recall(cfg.data.recall, T), "val")
    above, top_gist, base_losses, focus_losses, answer_hits = [], [], [], [], []
    base_answer, focus_answer = [], []
    # tail_loss_mask scores the last (n - 1) targets: n = value_len + 1 scores exactly the value tokens
    answer_tail = cfg.data.recall.value_len + 1
    for k in range(N_DOCS):
        doc = src.doc(k, T)
        s = ctrl.begin_session(doc.ids)  # recency-baseline layout (WorkingContext.build, fill=True)
        mwc = s.materialize()
        scores = ctrl.lensnet_scores(mwc, s.num_tokens)[: mwc.length]
        value_tok = doc.value_span(doc.answer_record)[0]
        idx = next(i for i in range(len(s.wc)) if s.wc.span(i)[0] <= value_tok < s.wc.span(i)[1])
        above.append(float(scores[idx]) > statistics.median(scores.tolist()))
        gists = [i for i, lod in enumerate(s.wc.lods()) if lod > 0]
        top_gist.append(max(gists, key=lambda i: float(scores[i])) == idx)
        base_losses.append(_tail_loss(ctrl, s, cfg.eval.tail_tokens))
        base_answer.append(_tail_loss(ctrl, s, answer_tail))
        ctrl.refocus()
        focus_losses.append(_tail_loss(ctrl, s, cfg.eval.tail_tokens))
        focus_answer.append(_tail_loss(ctrl, s, answer_tail))
        answer_hits.append(s.wc.lod_map()[value_tok].item() == 0)
    n = len(above)
    return {"above_median_rate": sum(above) / n, "queried_block_top_gist_rate": sum(top_gist) / n,
            "baseline_tail_loss": sum(base_losses) / n, "focused_tail_loss": sum(focus_losses) / n,
            "focused_better_rate": sum(f < b for f, b in zip(focus_losses, base_losses)) / n,
            "baseline_answer_loss": sum(base_answer) / n, "focused_answer_loss": sum(focus_answer) / n,
            "answer_better_rate": sum(f < b for f, b in zip(focus_answer, base_answer)) / n,
            "value_at_lod0_after_refocus_rate": sum(answer_hits) / n}


@pytest.mark.slow  # ~3-4 minutes on a 2-core CPU (stage 1: 1500 steps); still part of the default suite
@pytest.mark.parametrize("seed", SEEDS)
def test_lensnet_learns_where_detail_matters(tmp_path, seed):
    cfg = learning_cfg()
    cfg.train.seed = seed
    t0 = time.perf_counter()
    train_stage1(cfg, tmp_path, progress=False)
    t1 = time.perf_counter()
    s2 = train_stage2(cfg, tmp_path, progress=False)
    t2 = time.perf_counter()
    dev = resolve_device(cfg.train.device)
    untrained = build_controller(cfg, device=dev, base_weights=tmp_path / "stage1" / "base.pt")
    trained = build_controller(cfg, device=dev, base_weights=tmp_path / "stage1" / "base.pt")
    trained.load_state_dict(load_checkpoint(tmp_path / "stage2" / "ckpt.pt")["controller"])
    before, after = measure(untrained, cfg), measure(trained, cfg)
    report = {"untrained": before, "trained": after, "stage2_summary": s2,
              "stage1_s": t1 - t0, "stage2_s": t2 - t1, "n_docs": N_DOCS}
    (tmp_path / "learning_metrics.json").write_text(json.dumps(report, indent=1))
    print("\nlearning test:", json.dumps(report, indent=1))
    # LensNet ranks the queried record's block above the median entry in a clear majority
    assert after["above_median_rate"] >= 0.75, report
    # ... which an untrained LensNet does not (the rate is not an artefact of the layout)
    assert after["above_median_rate"] > before["above_median_rate"] + 0.2, report
    # refocus brings the queried value back to LOD0 (the allocator acts on the ranking)
    assert after["value_at_lod0_after_refocus_rate"] >= 0.8, report
    # ... so the base reads the answer: the value's loss falls from chance (~2.3 nats over 10 digits) to
    # near 0 (measured margins 2.22-2.35 nats over nine seed x kernel runs; the bar is 1 nat)
    assert after["focused_answer_loss"] < after["baseline_answer_loss"] - 1.0, report
    assert after["answer_better_rate"] >= 0.9, report
    # ... and the 16-token tail as a whole reads better (measured margins 0.19-0.65 nats). The share of
    # documents whose *tail* loss fell (0.56-0.89) is reported, not asserted: the trade that makes room for
    # the record can cost the other tail tokens more than the answer gains on a given document.
    assert after["focused_tail_loss"] < after["baseline_tail_loss"], report
