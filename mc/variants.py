"""Training variant sampler: a recency baseline plus random block-aligned compressions.

Owns choosing, per training sequence, which working contexts stage 2 compares (obsidian
"Design", learning). Every variant tiles the whole history, keeps the recent tail at LOD0 and
respects the budget. Random variants start from the coarsest layout and expand uniformly chosen gists until
they have the baseline's entry count. Every layout is some set of expansions of the coarsest one,
and each expansion adds exactly K-1 entries, so the baseline's count is always reachable when the
history has enough gists to expand; otherwise a variant stops with fewer entries (the batch pads).
"""
from __future__ import annotations

import torch

from mc.working_context import WorkingContext


def _random_expansion(coarse: WorkingContext, target: int, generator: torch.Generator) -> WorkingContext:
    wc = coarse.copy()
    K = wc.block_size
    while len(wc) + K - 1 <= target:
        gists = [i for i, lod in enumerate(wc.lods()) if lod > 0]
        if not gists:
            break
        pick = int(torch.randint(len(gists), (1,), generator=generator))
        wc.expand(gists[pick])
    return wc


def sample_variants(
    num_tokens: int,
    *,
    block_size: int,
    max_lod: int,
    max_entries: int,
    recent_tokens: int,
    n_random: int,
    generator: torch.Generator,
) -> list[WorkingContext]:
    """``[baseline, random_1 .. random_n]`` for a history of ``num_tokens`` tokens.

    ``[0]`` is ``WorkingContext.build(fill=True)`` (recency-graded); the others are random
    block-aligned compressions with the same number of entries as the baseline when reachable.
    Deterministic for a given generator state; the generator is the only source of randomness.
    """
    if not isinstance(n_random, int) or n_random < 0:
        raise ValueError(f"n_random must be an integer >= 0, got {n_random!r}")
    if not isinstance(generator, torch.Generator):
        raise ValueError("generator must be a torch.Generator (seed it for reproducible variants)")
    geometry = dict(block_size=block_size, max_lod=max_lod, max_entries=max_entries, recent_tokens=recent_tokens)
    baseline = WorkingContext.build(num_tokens, fill=True, **geometry)
    coarse = WorkingContext.build(num_tokens, fill=False, **geometry)
    return [baseline] + [_random_expansion(coarse, len(baseline), generator) for _ in range(n_random)]
