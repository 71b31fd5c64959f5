"""The focus allocator: LensNet scores -> legal expand/collapse edits on a working context.

Owns edit selection (pure), edit application, hysteresis (cooldown) state and making room for
appends. Pure Python over entries: a WC has a few hundred entries, and the edits it chooses feed
Python-side structures anyway.

Two policies (``allocator.policy``; see obsidian "Focus Allocator" for the argument):

**relative** (the default). Decisions use rankings, not the absolute scale LensNet's scores
happen to have after a training run (a fixed threshold on raw scores made focus a knife edge: the
same recipe moved detail on one CPU and chose no edit on another). Each kind of candidate is
standardised against its own kind, ``z = (x - median(x)) / std(x)``: gists (expansion
candidates) against the working context's gists, sibling groups (what a trade would collapse, by
their mean score) against the legal groups. Comparing the two kinds on one raw axis would let a
per-kind prior decide (LOD0 entries near the query score higher on average than any gist). Only
expansions are wanted: a gist is a candidate when ``z_gist >= expand_z`` (or when it is among the
``expand_top`` highest and ``z_gist > 0``: a detailed child that ranks first in a flat field of
gists, what multi-level refocus needs); candidates are taken
strongest first; room comes from the free budget, else from a *trade* with the cheapest group when
``z_gist - z_group >= trade_margin_z``. Nothing is collapsed for its own sake: "less useful than
the rest" is not "useless", and room is only worth making for an expansion. Scores that do not
rank the gists (constant) give z = 0 and no edit.

**absolute** (the first design, kept for comparison):

- expand entry i when ``score[i] >= expand_threshold`` and its LOD > 0;
- collapse the K aligned siblings starting at i when ``mean(score[i:i+K]) <= -collapse_threshold``;
- the recent tail is never touched (the WC's own legality checks refuse it);
- no two edits of one :meth:`FocusAllocator.select` touch the same entry;
- budget: edits are applied collapses first, so the count only dips before it rises; the plan keeps
  ``len(wc) + (K-1) * (expands - collapses) <= max_entries``. Room for an expansion comes from
  collapses whose own scores ask for it (mean <= -collapse_threshold) and, when none is left, from a
  *trade*: the lowest-scored legal group is collapsed if its mean score is below the waiting
  expansion's score by at least ``collapse_threshold``. A working context is usually full (sessions
  start from a filled layout), so without trades focus could never move detail; the margin keeps
  trades from churning between near-equal scores. The expansion itself still needs
  ``score >= expand_threshold``;
Both policies:

- hysteresis: an edit is not undone within ``cooldown`` refocuses. After an expand the K children are
  marked, and a collapse of a group holding a marked child is refused; after a collapse the parent is
  marked, and its expansion is refused. Marks are keyed by node identity ``(lod, index)``, so they
  survive index shifts. Continuing in the same direction (expanding a fresh child further,
  collapsing a fresh parent with its siblings) is allowed. :meth:`FocusAllocator.end_refocus`
  advances the clock; a mark set at clock c blocks while ``clock - c < cooldown``.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Sequence

from torch import Tensor

from mc.config import ALLOCATOR_POLICIES, AllocatorConfig
from mc.working_context import Entry, WorkingContext


@dataclass
class Edit:
    kind: str  # "expand" | "collapse"
    entry: Entry  # the expanded node, or the FIRST of the K collapsed siblings
    index: int  # its position in the WC when the edit was selected (before any edit of the batch)


def _scores_list(wc: WorkingContext, scores: Tensor | Sequence[float] | None) -> list[float] | None:
    """Scores as floats for the first len(wc) entries (a longer, padded vector is allowed)."""
    if scores is None:
        return None
    if isinstance(scores, Tensor):
        if scores.dim() != 1:
            raise ValueError(f"scores must be 1-D [W] (one per entry), got shape {tuple(scores.shape)}")
        vals = scores.detach().float().cpu().tolist()
    else:
        vals = [float(s) for s in scores]
    if len(vals) < len(wc):
        raise ValueError(f"got {len(vals)} scores for a working context of {len(wc)} entries; need one per entry "
                         "(extra trailing padding scores are ignored)")
    vals = vals[: len(wc)]
    if not all(math.isfinite(v) for v in vals):
        raise ValueError("scores contain NaN or inf; LensNet output must be finite")
    return vals


def standardize(vals: list[float]) -> list[float]:
    """z-scores ``(v - median) / std`` of one working context's scores (all 0 when the scores are constant).

    The median, not the mean, centres them: one strongly wanted entry should not pull the centre
    towards itself. The (population) std sets the unit, so the result is invariant to any positive
    affine change of the scores (``a * s + b``, ``a > 0``).
    """
    n = len(vals)
    if n == 0:
        return []
    ordered = sorted(vals)
    median = ordered[n // 2] if n % 2 else 0.5 * (ordered[n // 2 - 1] + ordered[n // 2])
    mean = sum(vals) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in vals) / n)
    if std <= 1e-6 * max(1.0, abs(mean)):  # constant scores (up to float noise): no preference at all
        return [0.0] * n
    # Rounded: z-scores that should tie with a threshold exactly (two gists give z = +-1) would
    # otherwise land on either side of it depending on the scale's float rounding.
    return [round((v - median) / std, 9) for v in vals]


class FocusAllocator:
    """Chooses and applies legal edits from scores, with cooldown state (see module docstring)."""

    def __init__(self, cfg: AllocatorConfig) -> None:
        if not 0.0 <= cfg.expand_threshold < 1.0 or not 0.0 <= cfg.collapse_threshold < 1.0:
            raise ValueError(f"allocator thresholds must be in [0, 1), got expand={cfg.expand_threshold}, "
                             f"collapse={cfg.collapse_threshold}")
        if not isinstance(cfg.cooldown, int) or cfg.cooldown < 0:
            raise ValueError(f"allocator cooldown must be an integer >= 0, got {cfg.cooldown!r}")
        if cfg.policy not in ALLOCATOR_POLICIES:
            raise ValueError(f"allocator policy must be one of {ALLOCATOR_POLICIES}, got {cfg.policy!r}")
        self.cfg = cfg
        self.clock = 0  # refocuses completed
        self._expanded_into: dict[Entry, int] = {}  # child node -> clock of the expand that made it
        self._collapsed_into: dict[Entry, int] = {}  # parent node -> clock of the collapse that made it

    def copy(self) -> "FocusAllocator":
        """An independent copy of the cooldown state (the config is shared): sessions edit a copy
        and keep it only when the whole append succeeds."""
        new = object.__new__(FocusAllocator)
        new.cfg, new.clock = self.cfg, self.clock
        new._expanded_into, new._collapsed_into = dict(self._expanded_into), dict(self._collapsed_into)
        return new

    # ------------------------------------------------------------------ cooldown

    def _cooling(self, marks: dict[Entry, int], node: Entry) -> bool:
        c = marks.get(node)
        return c is not None and self.clock - c < self.cfg.cooldown

    def expand_blocked(self, node: Entry) -> bool:
        """True if expanding ``node`` would undo a collapse made within the cooldown."""
        return self._cooling(self._collapsed_into, node)

    def collapse_blocked(self, wc: WorkingContext, i: int) -> bool:
        """True if collapsing the group at ``i`` would undo an expand made within the cooldown."""
        return any(self._cooling(self._expanded_into, wc[j]) for j in range(i, min(i + wc.block_size, len(wc))))

    def end_refocus(self) -> None:
        """Advance the cooldown clock by one refocus and forget expired marks."""
        self.clock += 1
        for marks in (self._expanded_into, self._collapsed_into):
            for node in [n for n, c in marks.items() if self.clock - c >= self.cfg.cooldown]:
                del marks[node]

    def mark_expanded(self, parents: Sequence[Entry], block_size: int) -> None:
        """Record the expansion of each of ``parents``: the cooldown then keeps ``make_room`` and collapses off
        their children. :meth:`apply` calls it for its own expansions; the oracle's planned layout
        (:mod:`mc.eval.oracle_layout`), made without the allocator, calls it for the needle's."""
        for lod, idx in parents:
            if lod < 1:
                raise ValueError(f"mark_expanded: {(lod, idx)} is an LOD0 token; only gists are expanded")
            for j in range(block_size):
                self._expanded_into[(lod - 1, idx * block_size + j)] = self.clock

    # ------------------------------------------------------------------ selection

    def select(self, wc: WorkingContext, scores: Tensor | Sequence[float], *, max_edits: int) -> list[Edit]:
        """Legal, non-overlapping edits for ``scores`` (one per entry); does not modify anything.

        Candidates are taken greedily by strength (expand: score; collapse: -mean score). An
        expansion that does not fit the budget waits until a later-chosen collapse frees room.
        The returned list holds the collapses first, then the expansions.
        """
        if not isinstance(max_edits, int) or max_edits < 0:
            raise ValueError(f"max_edits must be an integer >= 0, got {max_edits!r}")
        s = _scores_list(wc, scores)
        if self.cfg.policy == "relative":
            return self._select_relative(wc, s, max_edits)
        return self._select_absolute(wc, s, max_edits)

    def _legal_groups(self, wc: WorkingContext, s: list[float]) -> list[tuple[float, int]]:
        """Every sibling group that may be collapsed now: ``(mean score, first index)``, cheapest first."""
        K = wc.block_size
        groups = [(sum(s[i: i + K]) / K, i) for i in wc.collapsible() if not self.collapse_blocked(wc, i)]
        return sorted(groups)

    def relative_view(self, wc: WorkingContext, s: list[float]) -> tuple[dict[int, float], list[tuple[float, int]]]:
        """What the relative policy decides on: ``{gist index: z among gists}`` and the legal sibling
        groups as ``(z of their mean among the groups, first index)``, cheapest first."""
        gist_idx = [i for i, (lod, _) in enumerate(wc.entries) if lod > 0]
        z_gist = dict(zip(gist_idx, standardize([s[i] for i in gist_idx])))
        raw_groups = self._legal_groups(wc, s)
        return z_gist, sorted(zip(standardize([m for m, _ in raw_groups]), (g for _, g in raw_groups)))

    def _select_relative(self, wc: WorkingContext, s: list[float], max_edits: int) -> list[Edit]:
        """The relative policy (see the module docstring): gists ranked against gists, sibling groups
        against groups; expansions strongest first, paid for by free room, else by trading the
        cheapest group when ``z_gist - z_group >= trade_margin_z``."""
        K, cfg = wc.block_size, self.cfg
        z_gist, groups = self.relative_view(wc, s)
        open_ = {i: z for i, z in z_gist.items() if not self.expand_blocked(wc[i])}
        top = set(heapq.nsmallest(cfg.expand_top, open_, key=lambda i: (-open_[i], i)))  # the leaders, however flat
        cands = sorted((-z, i) for i, z in open_.items() if z >= cfg.expand_z or (i in top and z > 0))
        free = wc.max_entries - len(wc)
        used: set[int] = set()
        collapses: list[Edit] = []
        expands: list[Edit] = []
        for neg_z, i in cands:
            n_edits = len(collapses) + len(expands)
            if n_edits >= max_edits:
                break
            if i in used:
                continue
            if free >= K - 1:
                free -= K - 1
            else:
                if n_edits + 2 > max_edits:
                    break
                g = next((g for z, g in groups if z <= -neg_z - cfg.trade_margin_z
                          and not (set(range(g, g + K)) & used) and not g <= i < g + K), None)
                if g is None:
                    continue  # no group cheap enough for this candidate; a weaker one may find one it does not overlap
                used |= set(range(g, g + K))
                collapses.append(Edit("collapse", wc[g], g))
            used.add(i)
            expands.append(Edit("expand", wc[i], i))
        return collapses + expands

    def _select_absolute(self, wc: WorkingContext, s: list[float], max_edits: int) -> list[Edit]:
        """The absolute-threshold policy (see the module docstring)."""
        K = wc.block_size
        cfg = self.cfg
        cands: list[tuple[float, int, str, int]] = []  # (strength, tie-break, kind, index)
        groups: list[tuple[float, int]] = []  # every legal collapse group: (mean score, index)
        legal = set(wc.collapsible())
        for i, (lod, _) in enumerate(wc.entries):
            if lod > 0 and s[i] >= cfg.expand_threshold and not self.expand_blocked(wc[i]):
                cands.append((s[i], 1, "expand", i))
            if i in legal and not self.collapse_blocked(wc, i):
                mean = sum(s[i : i + K]) / K
                groups.append((mean, i))
                if mean <= -cfg.collapse_threshold:
                    cands.append((-mean, 0, "collapse", i))
        # Strongest first; ties: collapses before expands, then older entries first (deterministic).
        cands.sort(key=lambda c: (-c[0], c[1], c[3]))
        free = wc.max_entries - len(wc)
        used: set[int] = set()
        collapses: list[Edit] = []
        expands: list[Edit] = []
        waiting: list[int] = []  # expansions that wanted room, in strength order

        def take_waiting() -> None:
            nonlocal free
            for i in list(waiting):
                if len(collapses) + len(expands) >= max_edits or free < K - 1:
                    break
                if i not in used:
                    used.add(i)
                    free -= K - 1
                    expands.append(Edit("expand", wc[i], i))
                waiting.remove(i)

        for _, _, kind, i in cands:
            if len(collapses) + len(expands) >= max_edits:
                break
            if kind == "expand":
                if i in used:
                    continue
                if free >= K - 1:
                    used.add(i)
                    free -= K - 1
                    expands.append(Edit("expand", wc[i], i))
                else:
                    waiting.append(i)
            else:
                group = set(range(i, i + K))
                if group & used:
                    continue
                used |= group
                free += K - 1
                collapses.append(Edit("collapse", wc[i], i))
                take_waiting()
        # Trades for expansions still waiting: lowest-scored groups first, two edits each.
        groups.sort()
        for i in list(waiting):
            if len(collapses) + len(expands) + 2 > max_edits:
                break
            if i in used:
                continue
            for mean, g in groups:
                if mean > s[i] - cfg.collapse_threshold:
                    break  # sorted ascending: no cheaper group is left
                group = set(range(g, g + K))
                if group & used or i in group:
                    continue
                used |= group | {i}
                collapses.append(Edit("collapse", wc[g], g))
                expands.append(Edit("expand", wc[i], i))
                break
        return collapses + expands

    # ------------------------------------------------------------------ application

    def apply(self, wc: WorkingContext, edits: Sequence[Edit], *, respect_cooldown: bool = True) -> None:
        """Apply ``edits`` in place (collapses first) and record cooldown marks.

        Edits are located by node identity, so earlier edits shifting indices do not matter.
        An edit whose entry is gone, that is illegal, or (with ``respect_cooldown``) that would
        undo a cooling edit raises ValueError; edits before it stay applied.
        """
        K = wc.block_size
        ordered = [e for e in edits if e.kind == "collapse"] + [e for e in edits if e.kind == "expand"]
        if len(ordered) != len(edits):
            bad = next(e for e in edits if e.kind not in ("expand", "collapse"))
            raise ValueError(f"unknown edit kind {bad.kind!r}; expected 'expand' or 'collapse'")
        for e in ordered:
            try:
                i = wc.entries.index(tuple(e.entry))
            except ValueError:
                raise ValueError(f"{e.kind} of {e.entry}: that entry is no longer in the working context "
                                 "(an earlier edit of the same batch overlapped it)") from None
            lod, idx = wc[i]
            if e.kind == "expand":
                if respect_cooldown and self.expand_blocked(wc[i]):
                    raise ValueError(f"expand of entry {i} {wc[i]} breaks the cooldown: it was collapsed "
                                     f"within the last {self.cfg.cooldown} refocuses")
                wc.expand(i)
                self.mark_expanded([(lod, idx)], K)
            else:
                if respect_cooldown and self.collapse_blocked(wc, i):
                    raise ValueError(f"collapse at entry {i} {wc[i]} breaks the cooldown: a sibling was made by "
                                     f"an expand within the last {self.cfg.cooldown} refocuses")
                wc.collapse(i)
                self._collapsed_into[(lod + 1, idx // K)] = self.clock

    def step(self, wc: WorkingContext, scores: Tensor | Sequence[float], *, max_edits: int) -> list[Edit]:
        """select + apply; returns the applied edits."""
        edits = self.select(wc, scores, max_edits=max_edits)
        self.apply(wc, edits)
        return edits

    def make_room(self, wc: WorkingContext, n_new: int, scores: Tensor | Sequence[float] | None = None) -> list[Edit]:
        """Collapse sibling groups until ``len(wc) + n_new <= max_entries``; returns the edits applied.

        Picks the legal group with the lowest mean score (with ``scores``; a collapsed parent
        inherits its children's mean), else the oldest. Groups under cooldown are used only when
        nothing else is left, since the budget is a hard invariant and hysteresis is not. Each
        edit's ``index`` is its position at the time it was applied. ValueError if impossible.
        """
        if not isinstance(n_new, int) or n_new < 0:
            raise ValueError(f"make_room: n_new must be an integer >= 0, got {n_new!r}")
        s = _scores_list(wc, scores)
        K = wc.block_size
        done: list[Edit] = []
        while len(wc) + n_new > wc.max_entries:
            best = None
            for i in wc.collapsible():
                key = (self.collapse_blocked(wc, i), sum(s[i : i + K]) / K if s else 0.0, i)
                if best is None or key < best:
                    best = key
            if best is None:
                raise ValueError(
                    f"make_room: cannot fit {n_new} new tokens: {len(wc)} entries, max_entries={wc.max_entries}, "
                    f"and no sibling group outside the recent tail (last {wc.recent_tokens} tokens) can be collapsed "
                    "further; raise max_entries or max_lod, or lower recent_tokens"
                )
            i = best[2]
            lod, idx = wc[i]
            edit = Edit("collapse", wc[i], i)
            wc.collapse(i)
            self._collapsed_into[(lod + 1, idx // K)] = self.clock
            if s is not None:
                s[i : i + K] = [sum(s[i : i + K]) / K]
            done.append(edit)
        return done
