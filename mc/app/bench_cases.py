"""The benchmark's cases: each a (name, zero-argument callable) timed by :mod:`mc.app.bench`.

Every case goes through the controller's public helpers, so the compile boundary's clones and
CUDA-graph step marks are timed too. ``CASE_GROUPS`` (= ``bench.cases`` choices) filters them by
name prefix.
"""
from __future__ import annotations

from typing import Callable

import torch

from mc.config import BENCH_CASES, RunConfig


def build_cases(ctrl, cfg: RunConfig, device: torch.device) -> list[tuple[str, Callable[[], None]]]:
    from mc.tree import LifetimeGistTree  # noqa: PLC0415
    from mc.working_context import MaterializedWC, WCBuffer  # noqa: PLC0415

    mc, d = cfg.mc, cfg.model.d_model
    g = torch.Generator().manual_seed(0)
    cases = []
    for size in mc.bucket_ladder:
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
    cases.append(("train_step", train_step))

    n_app = 2 * mc.block_size ** mc.max_lod
    app_ids = torch.randint(0, 256, (n_app,), generator=g).to(device)
    with torch.no_grad():
        app_emb = ctrl.base.embed(app_ids[None])[0]

    def tree_append() -> None:
        tree = LifetimeGistTree(mc.block_size, mc.max_lod, d, ctrl.gist_blocks,
                                device=device)
        tree.append(app_ids, app_emb)
    cases.append((f"tree_append({n_app} tok)", tree_append))
    return cases


CASE_GROUPS = BENCH_CASES  # --cases filter: name prefixes of the cases above
