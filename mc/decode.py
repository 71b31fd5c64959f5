"""Decoding for an inference session: next-token logits through the KV cache, and the generate loop.

Owns :class:`CachedDecoder` (the base model's side of a session: a :class:`mc.kv_cache.KVCache`,
the suffix forward after an edit, the one-entry decode step, optionally compiled) and
:func:`generate` (sample, append, refocus on schedule; hooks for printing tokens and LOD maps).
The controller's ``generate`` delegates here; ``next_token_logits`` stays the cache-free
reference (the whole working context through the base model) that the cache must match.

Per step the decoder compares the working context's entries with what the cache holds
(:func:`mc.kv_cache.first_changed`) and runs the base model over the changed suffix only: one
entry after a plain append, everything from the first changed entry on after a refocus or a
collapse made to make room, in one batched forward. See obsidian Inference.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import Tensor

from mc.inputs import finite_logits
from mc.kv_cache import KVCache, slot_keys
from mc.nets.positional import lod_rotary_cos_sin, rotary_cos_sin, rotary_full
from mc.positions import IncrementalBasePositions
from mc.sampling import Sampler
from mc.session import InferenceSession
from mc.working_context import bucket_for


def supports_kv_cache(base) -> bool:
    """Whether ``base`` has the cached forward the decoder needs (the built-in GPT and the ``model=hf`` adapter do)."""
    return callable(getattr(base, "forward_cached", None))


NO_KV_CACHE = ("the KV cache needs a base with a cached forward (forward_cached, as the built-in GPT and the "
               "model=hf adapter have); this run's base model ({}) has none: decode without it (use_cache=False, "
               "or --no-kv-cache in mc_generate.py)")


class CachedDecoder:
    """Next-token logits of a session's working context, reusing cached keys/values."""

    def __init__(self, ctrl, *, compile_mode: str = "off") -> None:
        cfg = ctrl.cfg
        if not supports_kv_cache(ctrl.base):
            raise ValueError(NO_KV_CACHE.format(type(ctrl.base).__name__))
        self.base = ctrl.base
        self.ladder = sorted(cfg.mc.bucket_ladder)
        self.block_size = cfg.mc.block_size
        self.rope_base = cfg.model.rope_base
        self.position_mode, self.window, self.recent = cfg.mc.positions, cfg.model.max_seq_len, cfg.mc.recent_tokens
        head_dim = self.base.head_dim
        dtype = next(self.base.parameters()).dtype
        self.cache = KVCache(cfg.model.n_layers, self.base.kv_heads, head_dim, self.ladder[-1], device=ctrl.device,
                             dtype=dtype)
        self.session: InferenceSession | None = None
        self.last_recomputed = 0  # entries the last call ran through the base model (1 = a plain decode step)
        self._slots = torch.arange(self.ladder[-1], device=ctrl.device)  # sliced, never re-created
        self._rope_cos, self._rope_sin = self._plain_tables(cfg.model.max_seq_len)  # [P, hd] by token index
        self._positions: IncrementalBasePositions | None = None  # per session: what base_logits would see
        self.compile_mode = compile_mode
        self._step = self._suffix_step = None  # the compiled one-entry step and suffix (compile.decode on only)
        if compile_mode != "off":
            self._step = torch.compile(self.base.forward_cached, fullgraph=True, dynamic=False,
                                       mode=None if compile_mode == "default" else compile_mode)
            # The suffix after a collapse or a refocus, its rotary tables included: one graph per bucket whatever
            # its length S (marked dynamic per call), and no CUDA graphs whatever the step's mode: S varies, and
            # a recording per S would outnumber the suffixes it serves. At decode sizes the eager suffix is
            # op-bound like the step (obsidian Inference, "Compiled suffix").
            self._suffix_step = torch.compile(self._suffix, fullgraph=True, dynamic=None)

    def _plain_tables(self, size: int) -> tuple[Tensor, Tensor]:
        cos, sin = rotary_cos_sin(torch.arange(size, device=self.cache.k.device), self.base.head_dim, self.rope_base)
        return rotary_full(cos, sin)

    def _plain_row(self, p: int) -> tuple[Tensor, Tensor]:
        """The rotary rows ``[1, hd]`` of a single LOD0 entry at token index ``p`` (the decode step), read from a
        table of plain rows: the same function of the same float32 position, and LOD0's amplitude is exactly 1,
        so the values equal :func:`lod_rotary_cos_sin`'s while costing one slice instead of ~20 ops."""
        if p >= self._rope_cos.shape[0]:  # grow by doubling: amortised O(1) per token
            self._rope_cos, self._rope_sin = self._plain_tables(max(2 * self._rope_cos.shape[0], p + 1))
        return self._rope_cos[p: p + 1], self._rope_sin[p: p + 1]

    def _suffix(self, embeds_1sd: Tensor, pos_s: Tensor, lods_s: Tensor, k_cache: Tensor, v_cache: Tensor,
                slots_s: Tensor, window: int) -> Tensor:
        """The base over ``S`` suffix entries at positions ``pos_s`` and LODs ``lods_s``: their LOD-aware rotary
        tables, then :meth:`forward_cached` over the bucket's window with the causal mask (one graph compiled)."""
        cos, sin = rotary_full(*lod_rotary_cos_sin(pos_s, lods_s, self.block_size, self.base.head_dim, self.rope_base))
        return self.base.forward_cached(embeds_1sd, cos, sin, k_cache, v_cache, slots_s, window)

    def _gather(self, tree, keys: list) -> Tensor:
        """Embeddings ``[1, S, D]`` of the suffix entries, read from the tree like ``materialize`` does."""
        if len(keys) == 1:
            lod, idx, _ = keys[0]
            return tree.level(lod)[idx: idx + 1][None]
        dev = self.cache.k.device
        out = torch.empty(len(keys), tree.dim, device=dev, dtype=tree.level(0).dtype)
        by_lod: dict[int, tuple[list[int], list[int]]] = {}
        for slot, (lod, idx, _) in enumerate(keys):
            by_lod.setdefault(lod, ([], []))[0].append(slot)
            by_lod[lod][1].append(idx)
        for lod, (slots, idxs) in by_lod.items():
            rows = tree.level(lod).index_select(0, torch.tensor(idxs, device=dev))
            out.index_copy_(0, torch.tensor(slots, device=dev), rows)
        return out[None]

    def reset(self) -> None:
        """Forget the cached session: the next :meth:`logits` recomputes everything. Needed after
        ``InferenceSession.restore``: a rolled-back tree may refill a node index with another token, which
        the entry comparison (same ``(lod, index, position)``) cannot see."""
        self.session = None
        self.cache.clear()

    @torch.no_grad()
    def logits(self, session: InferenceSession) -> Tensor:
        """Logits ``[V]`` for the token after ``session``'s history (equal to the cache-free path)."""
        if session is not self.session:  # a new session: nothing cached belongs to it
            self.session = session
            self.cache.clear()
            self._positions = IncrementalBasePositions(mode=self.position_mode, window=self.window, recent=self.recent)
        wc = session.wc
        if wc is None:
            raise RuntimeError("the session is empty: call begin_session(prompt_ids) with at least one token first")
        keys = slot_keys(wc.entries, self._positions(wc.positions()))  # what base_logits would see
        n = len(keys)
        start = min(self.cache.valid_prefix(keys), n - 1)  # the last entry always runs: its logits are the output
        suffix = keys[start:]
        dev = self.cache.k.device
        embeds = self._gather(session.tree, suffix)
        slots = self._slots[start:n]
        k_c, v_c = self.cache.k, self.cache.v
        if len(suffix) == 1 and suffix[0][0] == 0:  # the decode step (one token): eager without a mask, or compiled
            cos, sin = self._plain_row(int(suffix[0][2]))
            if self.compile_mode == "off":  # exactly n keys, no mask
                out = self.base.forward_cached(embeds, cos, sin, k_c, v_c, slots, n, masked=False)[0]
            else:  # one graph per bucket: the bucket's static window and the causal mask
                # A CUDA-graph step's output lives in the graph pool and the next replay overwrites it.
                out = self._step(embeds, cos, sin, k_c, v_c, slots, bucket_for(n, self.ladder))[0].clone()
        else:  # a suffix: its rotary tables and the base in one call, compiled with dynamic S (S >= 2)
            pos = torch.tensor([k[2] for k in suffix], dtype=torch.float32, device=dev)
            lods = torch.tensor([k[0] for k in suffix], dtype=torch.long, device=dev)
            fn = self._suffix  # eager, and a lone gist (no recent tail), which the S >= 2 graph does not take
            if self.compile_mode != "off" and len(suffix) > 1:
                fn = self._suffix_step
                for t, dim in ((embeds, 1), (pos, 0), (lods, 0), (slots, 0)):
                    torch._dynamo.mark_dynamic(t, dim, min=2, max=self.ladder[-1])
            out = fn(embeds, pos, lods, k_c, v_c, slots, bucket_for(n, self.ladder))[0]  # [V]
        self.cache.commit(keys)
        self.last_recomputed = len(suffix)
        return out


@dataclass
class DecodeStats:
    """Timings and refocus records of one :func:`generate` call (the CLI's --json fields)."""

    decode_s: float = 0.0  # wall time of the loop, refocuses excluded
    refocus_ms: list[float] = field(default_factory=list)  # per refocus: allocator + the cache rebuild after it
    refocus_log: list[dict] = field(default_factory=list)
    checks: list[bool] = field(default_factory=list)  # per refocus check (refocus_check): whether it undid the edits
    check_ms: list[float] = field(default_factory=list)  # per refocus check: its time (out of decode_s, as refocuses)


def decoder_for(ctrl, *, compile_mode: str | None = None) -> CachedDecoder:
    """The controller's decoder, built on first use (one per controller, reset per session)."""
    mode = compile_mode or getattr(ctrl.cfg.compile, "decode", "off")
    dec = getattr(ctrl, "decoder", None)
    if dec is None or dec.base is not ctrl.base or dec.compile_mode != mode:
        dec = CachedDecoder(ctrl, compile_mode=mode)
        ctrl.decoder = dec
    return dec


RefocusHook = Callable[[str, InferenceSession], None]  # ("before" | "after", session)


@torch.no_grad()
def generate(ctrl, n: int, *, sampler: Sampler | None = None, use_cache: bool = True,
             on_token: Callable[[int], None] | None = None, on_refocus: RefocusHook | None = None,
             stats: DecodeStats | None = None) -> Tensor:
    """Decode ``n`` tokens into the controller's session (greedy unless ``sampler`` says otherwise).

    Each token is appended; every ``allocator.inference.refocus_interval`` tokens the allocator
    refocuses (``on_refocus`` sees the session before and after), first before the first token when one is due (a
    prompt of at least that many tokens since the last refocus: its question is read focused; that refocus is a
    question's, never a scheduled one, and in a session that refocused before it starts from a new session's layout:
    obsidian Inference, "A later question"), and with
    ``allocator.inference.refocus_check = k`` a refocus that made edits is checked k tokens later
    (:meth:`~mc.controller.MCController.check_refocus`; its time counts as the refocus's). Returns the ids ``[n]`` long.
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"generate: n must be an integer >= 0, got {n!r}")
    s = ctrl.session
    if s is None:
        raise RuntimeError("no inference session: call controller.begin_session(prompt_ids) first")
    sampler = sampler or Sampler(device=ctrl.device)
    dec = decoder_for(ctrl) if use_cache else None
    interval = ctrl.cfg.allocator.inference.refocus_interval
    stats = stats if stats is not None else DecodeStats()
    out: list[int] = []
    t0 = time.perf_counter()
    refocus_s = 0.0

    def refocus_now(scheduled: bool) -> tuple[Tensor | None, float]:
        """One refocus with its hooks, record and cache rebuild: (the rebuilt logits or None, its seconds)."""
        if on_refocus is not None:
            on_refocus("before", s)
        r0 = time.perf_counter()
        entries_before = s.wc.entries
        record = ctrl.refocus(scheduled=scheduled)
        rebuilt, logits = 0, None
        if dec is not None:  # the rebuild is part of the refocus's cost: run it now, not in the next step
            logits = dec.logits(s)
            rebuilt = dec.last_recomputed
        ms = (time.perf_counter() - r0) * 1e3
        stats.refocus_ms.append(ms)
        after = s.wc.entries
        first = next((i for i, (a, b) in enumerate(zip(entries_before, after)) if a != b),
                     min(len(entries_before), len(after)))
        stats.refocus_log.append({"num_tokens": record.num_tokens, "iterations": record.iterations,
                                  "edits": len(record.edits), "entries_before": len(entries_before),
                                  "entries_after": len(after), "first_changed_entry": first,
                                  "recomputed_entries": rebuilt, "relaid": record.relaid, "ms": ms})
        spent = time.perf_counter() - r0
        if on_refocus is not None:
            on_refocus("after", s)
        return logits, spent

    pending: Tensor | None = None  # logits the post-refocus rebuild already produced
    # Due before the first token only when a prompt came in since the last refocus (the loop refocuses as soon as one
    # is due): the question's refocus, never the session's own schedule (allocator.inference.scheduled_margin).
    if n and s.tokens_since_refocus >= interval:
        pending, refocus_s = refocus_now(scheduled=False)
    for _ in range(n):
        if pending is not None:
            logits, pending = pending, None
        else:
            logits = dec.logits(s) if dec is not None else ctrl.next_token_logits()
        tok = sampler(logits)
        if dec is not None:  # the cache-free path checked its logits already (next_token_logits)
            # Weights or gists that overflow at run time: an error, not a token drawn from NaN. Read with the token
            # in one host sync (the only one per token: the session's bookkeeping is Python).
            tid, finite = torch.stack((tok, torch.isfinite(logits).all().long())).tolist()
            if not finite:
                finite_logits(logits, "generate")  # raises, naming how many
        else:
            tid = int(tok)
        out.append(tid)
        if on_token is not None:
            on_token(tid)
        ctrl._extend(tok.view(1).to(ctrl.device, torch.long), refocus=False)  # drawn from the logits: in the vocabulary
        if s.check_due():  # allocator.inference.refocus_check: the cache sees an undone refocus as a new layout
            r0 = time.perf_counter()
            stats.checks.append(bool(ctrl.check_refocus()))
            stats.check_ms.append((time.perf_counter() - r0) * 1e3)
            refocus_s += time.perf_counter() - r0
        if s.tokens_since_refocus >= interval:
            pending, spent = refocus_now(scheduled=True)  # a session's first counts as its prompt's (MCController)
            refocus_s += spent
    stats.decode_s += time.perf_counter() - t0 - refocus_s
    return torch.tensor(out, dtype=torch.long)
