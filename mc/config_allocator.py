"""The focus allocator's configuration schemas: its edit rules (``allocator``) and the inference refocus (``allocator.inference``).

Their own module because the refocus has many documented knobs; :mod:`mc.config` re-exports both classes, so
``from mc.config import AllocatorConfig`` keeps working, and :mod:`mc.config_checks` validates them.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class AllocatorInferenceConfig:
    """How often and how hard the allocator refocuses during an inference session."""

    # allocator iterations (LensNet calls) per refocus, at most (it stops early at an iteration with no edit or at the
    # edit budget); reaching a token under an LOD-L gist takes L expansions, one per iteration: give >= max_lod
    iterations: int = 2
    max_edits: int = 4  # edits applied per iteration at most
    edit_budget: int = 0  # edits per refocus at most, over all its iterations (0 = iterations * max_edits)
    refocus_interval: int = 32  # tokens appended between refocuses
    # paths a refocus tries: 1 = LensNet's zoom alone; b > 1 also zooms each of the next b - 1 highest-scored gists (same
    # start and edit budget) and keeps the layout under which the base best predicts the newest branch_tail_tokens
    # tokens: b times the LensNet calls plus b base forwards per refocus (obsidian Focus Allocator).
    branches: int = 1
    branch_tail_tokens: int = 8  # newest tokens whose log-likelihood ranks the branches; < mc.recent_tokens (LOD0 tail)
    # nats: another path replaces LensNet's own zoom only when it fits those tokens better by this much. Small
    # differences are noise that would trade LensNet's (usually right) path for a wrong one (obsidian Focus Allocator).
    branch_margin: float = 8.0
    # With branches > 1: each candidate layout's fit also counts the log-probability of the base's own greedy
    # continuation of this many tokens under it: a question that names nothing (a passkey) fits every layout alike,
    # the base's sureness of what comes next does not (obsidian Focus Allocator, "Lookahead fit"). 0 = off.
    branch_lookahead: int = 0
    # With branches > 1 and descend_first: the branches also zoom the runner-up child under each gist LensNet's own zoom
    # opened (obsidian Focus Allocator, "Sibling branches"). false = off.
    branch_siblings: bool = False
    # With branches > 1: the starting layout (no edit) is a candidate too, tried last: a zoom trades the cheapest
    # groups, which can be the question's record at LOD0 (obsidian Focus Allocator, "Unchanged branch"). false = off.
    branch_unchanged: bool = False
    # With branches > 1: only a session of at most this many tokens zooms other paths; a longer one keeps LensNet's zoom
    # or (branch_unchanged) no edit (obsidian Focus Allocator, "Short histories branch"). 0 = any length.
    branch_max_tokens: int = 0
    # once a zoom has opened a block to LOD0, its next expansion is the bordering gist LensNet scores highest: a record
    # across two blocks is opened whole (obsidian Focus Allocator, "Edge first").
    edge_first: bool = False
    edge_sides: int = 1  # with edge_first: bordering expansions per zoom: 1 (LensNet's side), 2 (both), n > 2 (then outward)
    # an expansion of an LOD >= 2 gist is followed by that of its best-scored child: a zoom finishes the path it
    # started instead of leaving two half paths (obsidian Focus Allocator, "Descend first").
    descend_first: bool = False
    # in a refocus that does not branch: the token LensNet scores highest outside the recent tail, when it scores above 0
    # and above every gist, anchors it: no trade collapses its block, and (with edge_first) the zoom opens the gists
    # bordering that block first, so a record half raw and half under a gist is read whole (obsidian Focus Allocator,
    # "Token anchor").
    token_anchor: bool = False
    # m > 0: the raw blocks at and after the latest earlier occurrence of the session's newest m or more tokens (a
    # question's key in its record, found before the recent tail) are kept out of every refocus path's trades, so a
    # zoom cannot collapse a record the question already reads at full detail (obsidian Focus Allocator, "Suffix
    # guard"). 0 = off.
    suffix_guard: int = 0
    # with token_anchor and branch_unchanged: where the anchored zoom goes on past the gists bordering the anchor, its
    # layout at that point is a third candidate beside the whole zoom and the unchanged layout, kept when it fits the
    # question and lookahead better (obsidian Focus Allocator, "Anchor path"). false = off.
    anchor_path: bool = False
    # k > 0: a refocus that made edits is checked once k more tokens are in: the base's fit of those k tokens under the
    # session's layout against their fit under the layout the session would hold had that refocus made no edit (the
    # same appends replayed on it); the better one stays, so a refocus whose edits cost the text that follows it is
    # undone after k tokens instead of lasting. Costs two base forwards and k layout appends (no net call) per
    # refocus with edits (obsidian Focus Allocator, "Refocus check"). < mc.recent_tokens, <= refocus_interval; 0 = off.
    refocus_check: int = 0
    # m > 0 nats, with branch_unchanged: a refocus a session makes on its own schedule (every refocus_interval tokens
    # generated, or appended in chunks shorter than that, after its first) keeps the unchanged layout unless a path
    # fits the newest tokens (and lookahead) better by at least m nats. Not a question's: a session's first, generate's
    # before its first token, append's after a longer chunk, a direct refocus() call (obsidian Focus Allocator,
    # "Scheduled margin"; Inference, "A later question"). 0 = off. (Margin or not, such a refocus that keeps no edit
    # drops the token anchor's and suffix guard's cooldown marks it set: it leaves the session as it found it.)
    scheduled_margin: float = 0.0
    # m > 0 nats, with branch_unchanged: the same margin for a refocus at a prompt's end (every refocus not on the
    # session's schedule: the ones scheduled_margin above lists as a question's). The controller cannot tell a
    # question from text to be continued there; a zoom that finds what a question asks for fits its answer by several
    # nats, one made on plain text by less (obsidian Focus Allocator, "Prompt margin"). 0 = off.
    prompt_margin: float = 0.0


@dataclass
class AllocatorConfig:
    """Focus allocator: scores -> legal expand/collapse edits."""

    # "relative" (default): decisions on scores standardised within the working context (z = (s - median) / std),
    # so they do not depend on the absolute scale a training run happened to give LensNet's scores; room for an
    # expansion comes from the free budget, else from a trade with the lowest-scored sibling group.
    # "absolute": the fixed thresholds below on raw tanh scores (the first design; kept for comparison).
    policy: str = "relative"
    expand_z: float = 1.0  # relative: expand a gist whose z-score is >= this
    trade_margin_z: float = 1.0  # relative: a trade needs z(expanded) - mean z(collapsed group) >= this
    # relative: the this-many highest-z gists are candidates too while their z > 0, even below expand_z. Multi-level
    # refocus needs it: once a coarse gist is expanded, its detailed child competes with many similar gists and
    # rarely clears expand_z although it ranks first (obsidian Focus Allocator). 0 = expand_z alone decides.
    expand_top: int = 0
    expand_threshold: float = 0.2  # absolute: expand an entry whose score >= this
    collapse_threshold: float = 0.2  # absolute: collapse K siblings whose mean score <= -this (also the trade margin)
    cooldown: int = 2  # refocuses during which a changed entry is not flipped back
    inference: AllocatorInferenceConfig = field(default_factory=AllocatorInferenceConfig)
