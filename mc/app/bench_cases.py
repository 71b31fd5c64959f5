"""The benchmark's cases: each a (name, zero-argument callable) timed by :mod:`mc.app.bench`.

Every case goes through the controller's public helpers, so the compile boundary's clones and
CUDA-graph step marks are timed too. ``CASE_GROUPS`` (= ``bench.cases`` choices) filters them by
name prefix; only the requested groups are built (the session cases stream up to a million tokens).

``session_append@N`` / ``session_refocus@N``: one streamed token (``append(refocus=False)``) and one
refocus of a session already holding ``N`` tokens, for every ``N`` of ``bench.session_lengths``
(built with one long ``begin_session``). Flat cost per token means these medians do not grow with N
(obsidian "Working Context": nothing per append or refocus walks the history).
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


