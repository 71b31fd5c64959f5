"""The benchmark's cases: each a (name, zero-argument callable) timed by :mod:`mc.app.bench`.

Every case goes through the controller's public helpers, so the compile boundary's clones and
CUDA-graph step marks are timed too. ``CASE_GROUPS`` (= ``bench.cases`` choices) filters them by
name prefix; only the requested groups are built (the session cases stream up to a million tokens).

``session_append@N`` / ``session_refocus@N``: one streamed token (``append(refocus=False)``) and one
refocus of a session already holding ``N`` tokens, for every ``N`` of ``bench.session_lengths``
(built with one long ``begin_session``). Flat cost per token means these medians do not grow with N
(obsidian "Working Context": nothing per append or refocus walks the history).
A case returns None (the bench times the whole call) or the seconds it timed itself (the decode
cases: a fresh session is set up untimed before the timed region).
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch

from mc.config import BENCH_CASES, RunConfig

CASE_GROUPS = BENCH_CASES  # --cases filter: name prefixes of the cases below
DEFAULT_CASES = ("lensnet", "train", "tree")  # what runs unless asked: "session" streams up to 1M tokens


def build_cases(ctrl, cfg: RunConfig, device: torch.device,
                groups: Sequence[str] = BENCH_CASES) -> list[tuple[str, Callable[[], None]]]:
    from mc.tree import LifetimeGistTree  # noqa: PLC0415
    from mc.working_context import MaterializedWC, WCBuffer  # noqa: PLC0415

    mc, d = cfg.mc, cfg.model.d_model
    g = torch.Generator().manual_seed(0)
    cases = []
    for size in mc.bucket_ladder if "lensnet" in groups else ():
        buf = WCBuffer(size, d, device=device)
        n = min(size, mc.max_entries)
        buf.embeds.copy_(torch.randn(size, d, generator=g))
        buf.mask[:n] = True
        buf.positions.copy_(torch.arange(size, dtype=torch.float32) * 3)
        buf.lods.copy_(torch.randint(0, mc.max_lod + 1, (size,), generator=g))
        mwc = MaterializedWC(embeds=buf.embeds, mask=buf.mask, positions=buf.positions, lods=buf.lods,
                             token_ids=buf.token_ids, length=n, bucket=size)

        def lens_call(mwc=mwc, tokens=4 * size) -> None:
            ctrl.lensnet_scores(mwc, tokens)
        cases.append((f"lensnet_call@{size}", lens_call))

    ids = torch.randint(0, 256, (cfg.train.stage2.batch_size, mc.history_tokens), generator=g)
    opt = torch.optim.SGD(ctrl.aux_parameters(), lr=0.0)  # only for zero_grad (keeps grads under CUDA graphs)

    def train_step(plan=ctrl.prepare_step(ids, torch.Generator().manual_seed(1))) -> None:  # host half made ahead
        out = ctrl.run_step(plan)  # same variants every call
        out.total.backward()
        ctrl.end_micro_step()
        ctrl.zero_grad(opt)
    if "train" in groups:
        cases.append(("train_step", train_step))

    n_app = 2 * mc.block_size ** mc.max_lod
    app_ids = torch.randint(0, 256, (n_app,), generator=g).to(device)
    with torch.no_grad():
        app_emb = ctrl.base.embed(app_ids[None])[0]

    def tree_append() -> None:
        tree = LifetimeGistTree(mc.block_size, mc.max_lod, d, ctrl.gist_blocks,
                                device=device)
        tree.append(app_ids, app_emb)
    if "tree" in groups:
        cases.append((f"tree_append({n_app} tok)", tree_append))
    if "session" in groups:
        cases += session_cases(ctrl, cfg, device)
    if "decode" in groups or "refocus" in groups:
        cases += [c for c in decode_cases(ctrl, cfg) if any(c[0].startswith(g) for g in ("decode", "refocus") if g in groups)]
    return cases


def _label(n: int) -> str:
    return f"{n // 10**6}M" if n % 10**6 == 0 else f"{n // 1000}k" if n % 1000 == 0 else str(n)


def session_cases(ctrl, cfg: RunConfig, device: torch.device) -> list[tuple[str, Callable[[], None]]]:
    """Per length N: a session of N tokens, then one appended token and one refocus per call."""
    g = torch.Generator().manual_seed(2)
    cases = []
    for n in cfg.bench.session_lengths:
        session = ctrl.begin_session(torch.randint(0, 256, (n,), generator=g))
        tok = torch.randint(0, 256, (1,), generator=g)

        def append_one(session=session, tok=tok) -> None:
            ctrl.session = session
            ctrl.append(tok, refocus=False)

        def refocus(session=session) -> None:
            ctrl.session = session
            ctrl.refocus()
        cases += [(f"session_append@{_label(n)}", append_one), (f"session_refocus@{_label(n)}", refocus)]
    return cases


STEPS_PER_CALL = 8  # decode_step@: steps timed per call (seconds per step returned)


def _session_at(ctrl, n_prompt: int, *, use_cache: bool) -> None:
    """A fresh session over a fixed ``n_prompt``-token prompt, its first logits computed (the prefill)."""
    from mc.decode import decoder_for  # noqa: PLC0415

    ids = torch.randint(0, 256, (n_prompt,), generator=torch.Generator().manual_seed(n_prompt))
    s = ctrl.begin_session(ids)
    _ = decoder_for(ctrl).logits(s) if use_cache else ctrl.next_token_logits()


def decode_cases(ctrl, cfg: RunConfig) -> list[tuple[str, Callable[[], float]]]:
    """``decode_step@W/cache|nocache``: the base model's part of one decode step on an unchanged session
    in bucket W (with the cache: the last entry alone; without: the whole working context), the mean
    of :data:`STEPS_PER_CALL` consecutive steps.
    ``decode@W/cache|nocache``: seconds per generated token (greedy, refocus on schedule but its time
    excluded: that is ``refocus@``) with every working context of the call in bucket W. Below the budget
    the prompt is all LOD0 and grows into W; at the budget's bucket the prompt is twice the budget, so
    every token makes room (collapses) as in a long session. ``refocus@W/cache|nocache``: one refocus
    plus the next logits (with the cache: the rebuild from the first changed entry). Both time only
    their own region (a fresh session per call is set up untimed) and return seconds (obsidian Inference).
    """
    import time  # noqa: PLC0415

    from mc.decode import DecodeStats, decoder_for  # noqa: PLC0415

    mc = cfg.mc
    ladder = sorted(mc.bucket_ladder)
    budget_bucket = next(b for b in ladder if b >= mc.max_entries)
    cases: list[tuple[str, Callable[[], float]]] = []
    for lo, size in zip([0, *ladder], ladder):
        if size > budget_bucket:
            break
        if size == budget_bucket:
            n0, m = 2 * mc.max_entries, 32
        else:
            n0 = max(lo + 1, size - 32)
            m = size - n0
        for use_cache in (True, False):
            def step(n=min(size, 2 * mc.max_entries), use_cache=use_cache, held={}) -> float:
                if held.get("session") is None or ctrl.session is not held["session"]:  # first call, or another case ran: set this one's session up again
                    _session_at(ctrl, n, use_cache=use_cache)
                    held["session"] = ctrl.session
                t = time.perf_counter()
                for _ in range(STEPS_PER_CALL):  # consecutive steps, as in decoding (warm CPU caches)
                    _ = decoder_for(ctrl).logits(ctrl.session) if use_cache else ctrl.next_token_logits()
                return (time.perf_counter() - t) / STEPS_PER_CALL
            cases.append((f"decode_step@{size}/{'cache' if use_cache else 'nocache'}", step))

            def decode(n0=n0, m=m, use_cache=use_cache) -> float:
                _session_at(ctrl, n0, use_cache=use_cache)
                stats = DecodeStats()
                ctrl.generate(m, use_cache=use_cache, stats=stats)
                return stats.decode_s / m
            cases.append((f"decode@{size}/{'cache' if use_cache else 'nocache'}", decode))

    for use_cache in (True, False):
        def refocus(use_cache=use_cache) -> float:
            _session_at(ctrl, 2 * mc.max_entries, use_cache=use_cache)
            t = time.perf_counter()
            ctrl.refocus()
            _ = decoder_for(ctrl).logits(ctrl.session) if use_cache else ctrl.next_token_logits()
            return time.perf_counter() - t
        cases.append((f"refocus@{budget_bucket}/{'cache' if use_cache else 'nocache'}", refocus))
    return cases


