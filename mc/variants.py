"""Training variant sampler: a recency baseline plus random block-aligned compressions.

Owns choosing, per training sequence, which working contexts stage 2 compares (obsidian
"Design", learning). Every variant tiles the whole history, keeps the recent tail at LOD0 and
respects the budget. Random variants start from the coarsest layout and expand uniformly chosen gists until
they have the baseline's entry count. Every layout is some set of expansions of the coarsest one,
and each expansion adds exactly K-1 entries, so the baseline's count is always reachable when the
history has enough gists to expand; otherwise a variant stops with fewer entries (the batch pads).

*Guided* variants (``n_guided`` of the random ones, on sequences with a ``focus_span``: the queried
record of a recall document) first expand every gist over the span, level by level, then expand at
random like the others. The first goes down to LOD0; each further one stops at a random level in
``[0, max_lod)``, so the path's intermediate gists (the LOD1 gist over the record, say) are entries
of some variants and get compared with finer ones. Why: past the window the record sits under an
LOD-L gist and a useful layout needs all L expansions on its path; uniform random expansions
almost never make all of them (measured: preference accuracy stayed at chance, 0.50, at 1024-token
histories with ``max_lod`` 3), so no pair of variants told LensNet that the path matters.
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


def _guided_expansion(coarse: WorkingContext, target: int, span: tuple[int, int], stop_lod: int,
                      generator: torch.Generator) -> WorkingContext:
    wc = coarse.copy()
    K = wc.block_size
    start, end = span
    while len(wc) + K - 1 <= target:
        lods = wc.lods()
        i = next((i for i in range(len(wc)) if lods[i] > stop_lod and wc.span(i)[0] < end and start < wc.span(i)[1]), None)
        if i is None:
            break
        wc.expand(i)  # the oldest gist over the span: every level of its path, one expansion each
    return _random_expansion(wc, target, generator)


def sample_variants(
    num_tokens: int,
    *,
    block_size: int,
    max_lod: int,
    max_entries: int,
    recent_tokens: int,
    n_random: int,
    generator: torch.Generator,
    focus_span: tuple[int, int] | None = None,
    n_guided: int = 0,
) -> list[WorkingContext]:
    """``[baseline, random_1 .. random_n]`` for a history of ``num_tokens`` tokens.

    ``[0]`` is ``WorkingContext.build(fill=True)`` (recency-graded); the others are random
    block-aligned compressions with the same number of entries as the baseline when reachable.
    With a ``focus_span`` (token range), the first ``min(n_guided, n_random)`` of them are guided
    (the span's path expanded to LOD0 first, see the module docstring).
    Deterministic for a given generator state; the generator is the only source of randomness.
    """
    if not isinstance(n_random, int) or n_random < 0:
        raise ValueError(f"n_random must be an integer >= 0, got {n_random!r}")
    if not isinstance(generator, torch.Generator):
        raise ValueError("generator must be a torch.Generator (seed it for reproducible variants)")
    geometry = dict(block_size=block_size, max_lod=max_lod, max_entries=max_entries, recent_tokens=recent_tokens)
    if not isinstance(n_guided, int) or n_guided < 0:
        raise ValueError(f"n_guided must be an integer >= 0, got {n_guided!r}")
    if focus_span is not None and not 0 <= focus_span[0] < focus_span[1] <= num_tokens:
        raise ValueError(f"focus_span {focus_span} is not a non-empty token range inside the {num_tokens}-token history")
    baseline = WorkingContext.build(num_tokens, fill=True, **geometry)
    coarse = WorkingContext.build(num_tokens, fill=False, **geometry)
    guided = min(n_guided, n_random) if focus_span is not None else 0
    out = [baseline]
    for k in range(n_random):
        if k < guided:  # the first all the way to LOD0; the others stop at a random level above it
            stop = 0 if k == 0 else int(torch.randint(max_lod, (1,), generator=generator))
            out.append(_guided_expansion(coarse, len(baseline), focus_span, stop, generator))
        else:
            out.append(_random_expansion(coarse, len(baseline), generator))
    return out
