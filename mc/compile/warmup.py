"""Warm-up of the compiled boundary: every (bucket x mode) the config compiles, run before real work.

Owns :func:`warm_up_controller`, which :meth:`mc.controller.MCController.warmup` calls. It goes
through the controller's public helpers only (``train_step``/``end_micro_step``,
``lensnet_scores``, ``gist_blocks``), so warm-up exercises exactly the call sites real work uses.
Each shape runs ``compile.warmup_iters`` times (3 = CUDA-graph warm-up, record, replay); then the
runtime freezes (``compile.freeze``). See obsidian "Compiled boundary".
"""
from __future__ import annotations

from typing import Iterable, Protocol

import torch
from torch import Tensor

from mc.compile.boundary import freeze
from mc.compile.telemetry import Telemetry
from mc.config import RunConfig
from mc.step_plan import Spans, TrainStepOutput
from mc.working_context import MaterializedWC, WCBuffer


class WarmableController(Protocol):
    """What warm-up uses of a controller (``mc.controller.MCController`` is one). A Protocol, not an
    import: the controller calls this module, so importing it here would close a cycle."""

    cfg: RunConfig
    device: torch.device
    telemetry: Telemetry
    warmed_up: bool

    def aux_parameters(self) -> Iterable[torch.nn.Parameter]: ...
    def train_step(self, ids_bt: Tensor, generator: torch.Generator, focus_spans: Spans = None) -> TrainStepOutput: ...
    def end_micro_step(self) -> None: ...
    def lensnet_scores(self, mwc: MaterializedWC, num_tokens: int) -> Tensor: ...
    def gist_blocks(self, blocks_nkd: Tensor, *, train: bool = False) -> Tensor: ...


def warm_up_controller(ctrl: WarmableController, generator: torch.Generator | None = None) -> dict:
    """Training: full micro-steps with backward at the training shape. Inference: one LensNet call
    per bucket of ``mc.bucket_ladder`` and one GistNet call per bucket of ``mc.gist_bucket_ladder``.
    Gradients produced here are zeroed in place (not freed). Returns the telemetry snapshot."""
    comp, mc = ctrl.cfg.compile, ctrl.cfg.mc
    gen = generator or torch.Generator().manual_seed(0)
    iters = comp.warmup_iters
    d, k = ctrl.cfg.model.d_model, mc.block_size
    if comp.is_on("train"):
        # Under CUDA graphs train_step gives every parameter its .grad outside the graph pool first
        # (boundary.grads_outside_graph_pool); the grads made here are zeroed in place after, never freed.
        b = ctrl.cfg.train.stage2.batch_size
        for _ in range(iters):
            # byte ids 0..255: valid for every vocabulary the project builds (and what the telemetry baselines used)
            ids = torch.randint(0, 256, (b, mc.history_tokens), generator=gen)
            ctrl.train_step(ids, gen).total.backward()
            ctrl.end_micro_step()
        for p in ctrl.aux_parameters():
            if p.grad is not None:
                p.grad.zero_()
    if comp.lensnet.is_on("inference"):
        buf = WCBuffer(max(mc.bucket_ladder), d, device=ctrl.device)
        for size in mc.bucket_ladder:
            n = min(size, mc.max_entries)
            buf.embeds.normal_(generator=None)
            buf.mask[:n], buf.mask[n:] = True, False
            buf.positions.copy_(torch.arange(buf.capacity, dtype=torch.float32))
            buf.lods.zero_()
            mwc = MaterializedWC(embeds=buf.embeds[:size], mask=buf.mask[:size], positions=buf.positions[:size],
                                 lods=buf.lods[:size], token_ids=buf.token_ids[:size], length=n, bucket=size)
            for _ in range(iters):
                ctrl.lensnet_scores(mwc, 4 * size)
    if comp.gistnet.is_on("inference"):
        for size in mc.gist_bucket_ladder:
            for _ in range(iters):
                ctrl.gist_blocks(torch.randn(size, k, d, device=ctrl.device))
    if ctrl.telemetry.monitor.started:  # nothing compiles when every mode is "off": nothing to freeze
        freeze(comp.freeze, ctrl.telemetry.monitor)
    ctrl.warmed_up = True
    return ctrl.telemetry.snapshot()
