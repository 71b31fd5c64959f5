"""MCController: the one place that runs GistNet and LensNet, in training and at inference.

Orchestration only. The tree, working context, allocator, nets, losses, compile boundary and telemetry live in
their own modules; this class wires them and owns three helpers that are the **only** call sites of the (possibly
compiled) nets:

* ``_run_gistnet(blocks, context)``: every gist, for tree appends (inference) and batched tree levels (training).
  Inference calls are padded to ``mc.gist_bucket_ladder``.
* ``_run_lensnet_batched(...)``: the training path, one call per micro-step over all variants, one padded shape.
* ``_lensnet_allocator_scores(mwc, num_tokens)``: the inference allocator path, one call per allocator iteration,
  padded to a bucket of ``mc.bucket_ladder``.

Each helper clones the net's output exactly once, right there: under CUDA graph trees a raw output lives in
the graph pool and a later replay overwrites it. Step marks (``torch.compiler.cudagraph_mark_step_begin``) have
one owner, the :class:`StepMarker`, and come at step boundaries only: after a training micro-step's backward
(:meth:`end_micro_step`) and before each inference call. See obsidian "Compiled boundary".
"""
from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.profiler import record_function

from mc.compile.boundary import (CompiledNet, StepMarker, apply_recompile_limit, freeze, grads_outside_graph_pool,
                                 recompile_limit_for, reentrance_reason)
from mc.compile.telemetry import Telemetry
from mc.config import RunConfig
from mc.inputs import finite_logits, token_batch, token_ids
from mc.nets.distill import full_history_distill
from mc.nets.gistnet import GistNet
from mc.nets.gpt import GPT
from mc.nets.lensnet import LensNet
from mc.nets.losses import base_tail_loss, stage2_objective
from mc.nets.positional import lod_rotary_cos_sin
from mc.nets.token_index import match_args, session_match, training_match
from mc.positions import base_positions
from mc.layout_fit import check_refocus, tail_fit
from mc.refocus import run_refocus
from mc.session import InferenceSession, RefocusRecord
from mc.tree import gist_levels
from mc.gather import gather_planned
from mc.step_plan import Ends, SpanLists, Spans, StepPlan, TrainStepOutput, plan_micro_step
from mc.working_context import MaterializedWC, WCBuffer, bucket_for


class MCController:
    """Owns the base model reference, GistNet, LensNet, the allocator and the compiled boundary."""

    def __init__(self, cfg: RunConfig, base: GPT, gistnet: GistNet, lensnet: LensNet, *,
                 device: torch.device | str = "cpu", telemetry: Telemetry | None = None):
        self.cfg = cfg
        self.device = torch.device(device)
        self.base, self.gistnet, self.lensnet = base, gistnet, lensnet
        if cfg.mc.freeze_base:  # stage 2 default: the base model is a fixed reader of the context
            base.requires_grad_(False)
            base.eval()
        self.telemetry = telemetry if telemetry is not None else Telemetry()
        comp = cfg.compile
        limit = comp.recompile_limit or recompile_limit_for(
            n_buckets=max(len(cfg.mc.bucket_ladder), len(cfg.mc.gist_bucket_ladder)) + cfg.mc.max_lod + 1,
            n_modes=2, margin=4)
        if comp.any_on:
            apply_recompile_limit(limit)
            if not self.telemetry.monitor.started:
                self.telemetry.start()  # compile events are only seen by a monitor installed before compiling
        self.compiled_gistnet = CompiledNet(gistnet, "gistnet", comp.gistnet, fullgraph=comp.fullgraph, telemetry=self.telemetry)
        self.compiled_lensnet = CompiledNet(lensnet, "lensnet", comp.lensnet, fullgraph=comp.fullgraph, telemetry=self.telemetry)
        self.marker = StepMarker([self.compiled_gistnet, self.compiled_lensnet], self.telemetry)
        self.session: InferenceSession | None = None
        self.decoder = None  # mc.decode.CachedDecoder, built on the first cached generate
        self.train_bucket = bucket_for(cfg.mc.max_entries, cfg.mc.bucket_ladder)
        self.warmed_up = False

    @property
    def cudagraphs_possible(self) -> bool:
        """True when some net runs a CUDA-graph mode on a CUDA device (marks then matter)."""
        return self.marker.active

    @property
    def variants_per_sequence(self) -> int:  # noqa: D102
        return 1 + self.cfg.mc.n_random_variants

    # ------------------------------------------------------------------ the helpers

    def _run_gistnet(self, blocks_nkd: Tensor, context: str) -> Tensor:
        """GistNet over ``[N, K, D]`` blocks -> ``[N, D]`` gists (cloned once)."""
        if context == "train":
            return self.compiled_gistnet.clone_outputs(self.compiled_gistnet.run(blocks_nkd, context="train"), context="train")
        ladder = self.cfg.mc.gist_bucket_ladder
        outs = []
        with torch.no_grad():
            for lo in range(0, blocks_nkd.shape[0], ladder[-1]):
                chunk = blocks_nkd[lo: lo + ladder[-1]]
                n, size = chunk.shape[0], bucket_for(chunk.shape[0], ladder)
                if size > n:  # pad to a bucket: static shapes, one cache entry per bucket
                    chunk = torch.cat([chunk, chunk.new_zeros(size - n, *chunk.shape[1:])])
                self._mark_inference_step("gistnet inference call")
                raw = self.compiled_gistnet.run(chunk, context="inference", rows=n)
                outs.append(self.compiled_gistnet.clone_outputs(raw[:n], context="inference"))
        return outs[0] if len(outs) == 1 else torch.cat(outs)

    def _run_lensnet_batched(self, embeds: Tensor, mask: Tensor, positions: Tensor, lods: Tensor,
                             num_tokens: Tensor, match: Tensor | None = None) -> Tensor:
        """Training: LensNet over all variants of the micro-batch at one padded shape -> ``[R, W]``."""
        raw = self.compiled_lensnet.run(embeds, mask, positions, lods, num_tokens,
                                        *match_args(self.lensnet.index, positions, match), context="train")
        return self.compiled_lensnet.clone_outputs(raw, context="train")

    def _lensnet_allocator_scores(self, mwc: MaterializedWC, num_tokens: int, match: Tensor | None = None) -> Tensor:
        """Inference: LensNet scores of one materialised working context -> ``[bucket]`` (``match``: the token index's)."""
        n_tok = torch.full((1,), float(num_tokens), device=mwc.embeds.device)  # a tensor: no value guard
        extra = match_args(self.lensnet.index, mwc.positions[None], None if match is None else match[None])
        self._mark_inference_step("allocator iteration")
        with torch.no_grad():
            raw = self.compiled_lensnet.run(mwc.embeds[None], mwc.mask[None], mwc.positions[None], mwc.lods[None],
                                    n_tok, *extra, context="inference", entries=mwc.length)
            return self.compiled_lensnet.clone_outputs(raw, context="inference")[0]

    def _mark_inference_step(self, reason: str) -> None:
        """Inference step boundary: the previous call's outputs were cloned, so a new generation is safe. Never mark
        inside a backward (re-entrance: it would free activations the backward needs); the boundary handles that call."""
        if reentrance_reason() is None:
            self.marker.mark(reason)

    # ------------------------------------------------------------------ public net calls (through the helpers)

    def gist_blocks(self, blocks_nkd: Tensor, *, train: bool = False) -> Tensor:
        """GistNet over ``[N, K, D]`` blocks -> ``[N, D]`` gists, through the GistNet helper."""
        return self._run_gistnet(blocks_nkd, "train" if train else "inference")

    def lensnet_scores(self, mwc: MaterializedWC, num_tokens: int) -> Tensor:
        """LensNet scores ``[bucket]`` of one materialised working context (the allocator's call)."""
        return self._lensnet_allocator_scores(mwc, num_tokens)

    # ------------------------------------------------------------------ training

    def prepare_step(self, ids_bt: Tensor, generator: torch.Generator, focus_spans: Spans = None, *,
                     decoy_spans: SpanLists = None, query_ends: Ends = None) -> StepPlan:
        """Host half of a micro-step (variants, gather tables, LOD maps; CPU, pinned for CUDA; :mod:`mc.train.prefetch`
        runs it ahead). Per row: the queried record's span, the others', where the answer starts (``plan_micro_step``)."""
        ids_bt = token_batch(ids_bt, self.cfg.model.vocab_size, self.cfg.mc.history_tokens, mix=self.cfg.mc.history_mix)
        return plan_micro_step(ids_bt, self.cfg.mc, self.train_bucket, generator, pin=self.device.type == "cuda",
                               focus_spans=focus_spans, decoy_spans=decoy_spans, query_ends=query_ends)

    def train_step(self, ids_bt: Tensor, generator: torch.Generator, focus_spans: Spans = None, *,
                   decoy_spans: SpanLists = None, query_ends: Ends = None) -> TrainStepOutput:
        """One stage-2 micro-step forward, ``run_step(prepare_step(ids_bt, generator, focus_spans))``: variants ->
        base losses -> LensNet losses. The caller runs ``out.total.backward()``, then :meth:`end_micro_step`."""
        return self.run_step(self.prepare_step(ids_bt, generator, focus_spans, decoy_spans=decoy_spans, query_ends=query_ends))

    def run_step(self, plan: StepPlan) -> TrainStepOutput:
        """Device half of a micro-step: no host-device sync; phases carry ``mc.step.*`` profiler labels (obsidian Training)."""
        mc, w = self.cfg.mc, self.train_bucket
        if plan.index.shape[1] != w:
            raise ValueError(f"run_step: the plan is padded to {plan.index.shape[1]} entries, training uses {w}")
        if self.cudagraphs_possible and torch.is_grad_enabled():
            grads_outside_graph_pool(self.aux_parameters())
        p = plan.to(self.device)
        b, v, t = p.batch, p.variants, p.ids.shape[1]
        with record_function("mc.step.gistnet"):
            with torch.set_grad_enabled(not mc.freeze_base and torch.is_grad_enabled()):
                embeds_btd = self.base.embed(p.ids)
            levels = gist_levels(embeds_btd, mc.block_size, mc.max_lod, lambda x: self._run_gistnet(x, "train"))
        with record_function("mc.step.gather"):
            embeds, mask = gather_planned(levels, p.index, p.lengths)  # [R, W, D], [R, W]
        with record_function("mc.step.base"):
            tail, logits = base_tail_loss(self.base_logits, embeds, p.positions, p.lods, mask, p.token_ids, p.lengths,
                                          mc.recent_tokens)  # [R], [R, recent - 1, V]: the LM head only where read
        with record_function("mc.step.losses"):
            distill = (full_history_distill(self.base_logits, embeds_btd, logits, mc.recent_tokens)
                       if mc.distill_weight else None)  # [R] KL from the base over the raw history (mc.step.teacher)
        num_tokens = torch.full((b * v,), float(t), device=self.device)
        # Detached by default: LensNet's losses train LensNet only; with mc.lens_trains_gist they reach GistNet too.
        lens_in = embeds if mc.lens_trains_gist else embeds.detach()
        with record_function("mc.step.lensnet"):
            match, token_match = (None, None) if self.lensnet.index is None else training_match(  # [R, W], [B, T]
                self.lensnet.index, embeds_btd, p.index, p.query_end, mc, p.ids)
            scores = self._run_lensnet_batched(lens_in, mask, p.positions, p.lods, num_tokens, match)  # [R, W]
        with record_function("mc.step.losses"):
            total, lm_loss, pref = stage2_objective(self.cfg, p, scores, mask, tail, levels, self.gistnet, distill, token_match)
        return TrainStepOutput(total=total, lm_loss=lm_loss, tail_losses=tail.detach().view(b, v),
                               preference=pref, scores=scores)

    def end_micro_step(self) -> None:
        """Call after the micro-step's backward: the one training step boundary for CUDA graphs."""
        self.marker.mark("after backward")
        self.telemetry.end_step()

    def zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        """Keep ``.grad`` allocated when CUDA graphs run (one allocated in a replay lives in the pool: overwritten)."""
        optimizer.zero_grad(set_to_none=not self.cudagraphs_possible)

    def aux_parameters(self) -> list[torch.nn.Parameter]:
        base = [] if self.cfg.mc.freeze_base else list(self.base.parameters())
        return list(self.gistnet.parameters()) + list(self.lensnet.parameters()) + base

    # ------------------------------------------------------------------ inference

    def base_logits(self, embeds: Tensor, positions: Tensor, lods: Tensor, mask: Tensor, *,
                    logit_index: Tensor | None = None) -> Tensor:
        """The base over working-context embeddings ``[B, W, D]`` (LOD-aware rotary) -> ``[B, W, V]`` (``[B, Q, V]``
        at ``logit_index [B, Q]``). ``positions`` are global; ``mc.positions`` maps them (mc.positions.base_positions)."""
        mc, m = self.cfg.mc, self.cfg.model
        pos = base_positions(positions, mask, mode=mc.positions, window=m.max_seq_len, recent=mc.recent_tokens)
        cos, sin = lod_rotary_cos_sin(pos, lods, mc.block_size, self.base.head_dim, m.rope_base)
        return self.base(embeds=embeds, cos=cos, sin=sin, key_padding_mask=mask, logit_index=logit_index)

    def begin_session(self, prompt_ids: Tensor) -> InferenceSession:
        """Start a session over ``prompt_ids [n]`` (any length, longer than the working context too)."""
        prompt_ids = token_ids(prompt_ids, self.cfg.model.vocab_size, "begin_session")  # 1-D ints in the vocabulary
        if prompt_ids.numel() == 0:
            raise ValueError("begin_session needs a non-empty prompt (at least one token id)")
        self.session = InferenceSession(self.cfg, lambda x: self._run_gistnet(x, "inference"),
                                        dim=self.cfg.model.d_model, device=self.device)
        self.append(prompt_ids, refocus=False)
        return self.session

    def _require_session(self) -> InferenceSession:
        if self.session is None:
            raise RuntimeError("no inference session: call controller.begin_session(prompt_ids) first")
        return self.session

    @torch.no_grad()
    def append(self, ids: Tensor, *, refocus: bool = True) -> None:
        """Append tokens; refocus every ``allocator.inference.refocus_interval`` tokens (after a chunk of that many
        or more, a prompt, the refocus is its question's: not scheduled, see :meth:`refocus`)."""
        self._extend(token_ids(ids, self.cfg.model.vocab_size, "append").to(self.device), refocus)  # 1-D, in the vocabulary

    @torch.no_grad()
    def _extend(self, ids: Tensor, refocus: bool) -> None:
        """:meth:`append` after its checks; ``generate`` calls it with its sampler's token (in the vocabulary)."""
        s, every = self._require_session(), self.cfg.allocator.inference.refocus_interval
        s.extend(ids, self.base.embed(ids[None])[0])
        if refocus and s.check_due():
            self.check_refocus()
        if refocus and s.tokens_since_refocus >= every:
            self.refocus(scheduled=ids.numel() < every)

    @torch.no_grad()
    def refocus(self, *, scheduled: bool = False) -> RefocusRecord:
        """A LensNet refocus (:mod:`mc.refocus`); ``scheduled``: the session's own, else a question's (relaid after a prompt)."""
        s = self._require_session()
        relaid = not scheduled and s.relayout_after_prompt()  # a later question is read as a session's first would be
        if s.check is not None:  # a refocus not yet checked (allocator.inference.refocus_check): judged first
            self.check_refocus(force=True)
        record = run_refocus(s, self.session_scores, self._tail_fit, scheduled and bool(s.refocus_log), relaid)
        self.telemetry.emit({"kind": "refocus", "num_tokens": s.num_tokens, "iterations": record.iterations,
                             "edits": len(record.edits), "entries": len(s.wc), "branch": record.branch})
        return record

    def check_refocus(self, *, force: bool = False) -> bool | None:
        """The check of the last refocus with edits (:func:`mc.layout_fit.check_refocus`): True if undone, None if not due."""
        return check_refocus(self, force=force, emit=self.telemetry.emit)

    def _tail_fit(self) -> float:
        """The branches' fit of the session's layout (:func:`mc.layout_fit.tail_fit`), one per controller to stub."""
        return tail_fit(self)

    def session_scores(self, s: InferenceSession) -> Tensor:
        """LensNet's scores ``[len(wc)]`` (CPU) of the session's working context with the index's match: what refocus ranks."""
        mwc, index, mc = s.materialize(), self.lensnet.index, self.cfg.mc
        match = None if index is None else session_match(index, s, mwc, block_size=mc.block_size, recent_tokens=mc.recent_tokens)
        return self._lensnet_allocator_scores(mwc, s.num_tokens, match)[: mwc.length].cpu()

    @torch.no_grad()
    def next_token_logits(self) -> Tensor:
        """Base-model logits ``[V]`` for the token after the session's history."""
        mwc = self._require_session().materialize()
        last = torch.full((1, 1), mwc.length - 1, dtype=torch.long, device=mwc.embeds.device)  # the LM head there only
        logits = self.base_logits(mwc.embeds[None], mwc.positions[None], mwc.lods[None], mwc.mask[None], logit_index=last)
        return finite_logits(logits[0, 0])

    @torch.no_grad()
    def generate(self, n: int, **kwargs) -> Tensor:
        """Decode ``n`` tokens ``[n]`` (greedy, KV cache, refocus on schedule; keywords: :func:`mc.decode.generate`)."""
        from mc.decode import generate  # noqa: PLC0415 - the decoder needs the controller, not vice versa
        return generate(self, n, **kwargs)

    # ------------------------------------------------------------------ warm-up and reports

    def warmup(self, generator: torch.Generator | None = None) -> dict:
        """Run every (bucket x mode) the config compiles ``compile.warmup_iters`` times, then freeze; returns the
        telemetry snapshot (:func:`mc.compile.warmup.warm_up_controller`)."""
        from mc.compile.warmup import warm_up_controller  # noqa: PLC0415 - warm-up needs the controller, not vice versa
        return warm_up_controller(self, generator)

    def state_dict(self) -> dict:
        """The trainable state: both aux nets, and the base model when it is not frozen."""
        out = {"gistnet": self.gistnet.state_dict(), "lensnet": self.lensnet.state_dict()}
        if not self.cfg.mc.freeze_base:
            out["base"] = self.base.state_dict()
        return out

    def load_state_dict(self, state: dict) -> None:
        self.gistnet.load_state_dict(state["gistnet"])
        self.lensnet.load_state_dict(state["lensnet"])
        if "base" in state:  # an unfrozen base (mc.freeze_base false)
            self.base.load_state_dict(state["base"])

