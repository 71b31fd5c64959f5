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

*Decoy* variants (``n_decoy``, after the guided ones, on sequences with ``decoy_spans``: the other
records of a multi-record document) do the same for a record that is *not* queried, one drawn at
random per variant: the first goes down to LOD0, the others stop at a random level. Why: at
inference a refocus that ranked a distractor's gist first zooms that path, and the next iteration
must rank the queried record's (still coarse) gist above the distractor's finer entries to turn
back. Random and guided layouts almost never hold a distractor's path expanded, so nothing trained
that situation; on a decoy layout the focus loss asks for exactly that ranking. Decoys serve the
focus loss only (:func:`variant_kinds` tells the controller which they are): the base copies
whatever record it sees at LOD0, so a decoy's tail loss is large (2.6-4.9 nats with the decoy at
LOD0, 1.8-2.2 for the baseline), and in the LM loss it taught GistNet to make the base hedge, in the preference loss its
pairs outweighed all others (obsidian Variant Sampler, "Decoys").
"""
from __future__ import annotations

from typing import Sequence

import torch

from mc.working_context import WorkingContext


def _random_expansion(coarse: WorkingContext, target: int, generator: torch.Generator) -> WorkingContext:
    wc = coarse.copy()
    K = wc.block_size
    # The gists' entry indices, ascending, kept up to date through each expansion instead of re-read from
    # wc.lods() (that O(W) walk per expansion was half of sample_variants' time at the h100 geometry); the
    # same list in the same order, so the same draws.
    gists = [i for i, lod in enumerate(wc.lods()) if lod > 0]
    while gists and len(wc) + K - 1 <= target:
        pick = int(torch.randint(len(gists), (1,), generator=generator))
        i = gists[pick]
        child_lod = wc[i][0] - 1
        wc.expand(i)
        gists[pick:] = [*(range(i, i + K) if child_lod > 0 else ()), *(g + K - 1 for g in gists[pick + 1:])]
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


def variant_kinds(n_random: int, *, n_guided: int = 0, n_decoy: int = 0, has_focus: bool = False,
                  has_decoys: bool = False) -> list[str]:
    """What each of ``sample_variants``'s ``1 + n_random`` layouts is, in order: ``"baseline"``, then
    ``"guided"``, ``"decoy"`` and ``"random"`` ones (the counts capped as the sampler caps them)."""
    guided = min(n_guided, n_random) if has_focus else 0
    decoys = min(n_decoy, n_random - guided) if has_decoys else 0
    return ["baseline"] + ["guided"] * guided + ["decoy"] * decoys + ["random"] * (n_random - guided - decoys)


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
    decoy_spans: Sequence[tuple[int, int]] = (),
    n_decoy: int = 0,
) -> list[WorkingContext]:
    """``[baseline, random_1 .. random_n]`` for a history of ``num_tokens`` tokens.

    ``[0]`` is ``WorkingContext.build(fill=True)`` (recency-graded); the others are random
    block-aligned compressions with the same number of entries as the baseline when reachable.
    With a ``focus_span`` (token range), the first ``min(n_guided, n_random)`` of them are guided
    (the span's path expanded to LOD0 first, see the module docstring). With ``decoy_spans`` (the
    other records' token ranges), the next ``n_decoy`` (as many as remain) are decoys: one of those
    spans, drawn at random, expanded the same way. Without decoy spans the draws are as before.
    Deterministic for a given generator state; the generator is the only source of randomness.
    """
    if not isinstance(n_random, int) or n_random < 0:
        raise ValueError(f"n_random must be an integer >= 0, got {n_random!r}")
    if not isinstance(generator, torch.Generator):
        raise ValueError("generator must be a torch.Generator (seed it for reproducible variants)")
    geometry = dict(block_size=block_size, max_lod=max_lod, max_entries=max_entries, recent_tokens=recent_tokens)
    if not isinstance(n_guided, int) or n_guided < 0:
        raise ValueError(f"n_guided must be an integer >= 0, got {n_guided!r}")
    if not isinstance(n_decoy, int) or n_decoy < 0:
        raise ValueError(f"n_decoy must be an integer >= 0, got {n_decoy!r}")
    named = ([("focus_span", focus_span)] if focus_span is not None else []) + [("decoy span", d) for d in decoy_spans]
    for name, span in named:
        if not 0 <= span[0] < span[1] <= num_tokens:
            raise ValueError(f"{name} {span} is not a non-empty token range inside the {num_tokens}-token history")
    baseline = WorkingContext.build(num_tokens, fill=True, **geometry)
    coarse = WorkingContext.build(num_tokens, fill=False, **geometry)
    kinds = variant_kinds(n_random, n_guided=n_guided, n_decoy=n_decoy, has_focus=focus_span is not None,
                          has_decoys=bool(decoy_spans))
    out = [baseline]
    for k, kind in enumerate(kinds[1:]):
        first = kind != kinds[k]  # the first of its kind goes all the way to LOD0; the others stop at a random level
        if kind == "guided":
            stop = 0 if first else int(torch.randint(max_lod, (1,), generator=generator))
            out.append(_guided_expansion(coarse, len(baseline), focus_span, stop, generator))
        elif kind == "decoy":  # the same for a record that is not queried
            span = decoy_spans[int(torch.randint(len(decoy_spans), (1,), generator=generator))]
            stop = 0 if first else int(torch.randint(max_lod, (1,), generator=generator))
            out.append(_guided_expansion(coarse, len(baseline), span, stop, generator))
        else:
            out.append(_random_expansion(coarse, len(baseline), generator))
    return out
