"""Inference session state: one sequence's gist tree, working context and allocator clock.

The session holds data, not policy: the :class:`mc.controller.MCController` drives it (appends,
refocuses, generation) and is the only thing that runs GistNet/LensNet. Keeping the state here
lets the controller stay orchestration-only and makes a session easy to inspect in tests
(``session.wc.entries``, ``session.tree.level(1)``, ``session.history``).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from mc.allocator import Edit, FocusAllocator
from mc.config import RunConfig
from mc.nets.token_index import SessionKeys
from mc.tree import GistFn, LifetimeGistTree
from mc.working_context import MaterializedWC, WCBuffer, WorkingContext, layout_depth, materialize


@dataclass
class RefocusRecord:
    """What one refocus did (kept for reports and LOD maps)."""

    num_tokens: int
    iterations: int  # allocator iterations actually run (stops early when no edit is chosen)
    edits: list[Edit] = field(default_factory=list)
    # the path kept (0: LensNet's own zoom; k: the k-th other path, allocator.inference.branches; the last index,
    # with no edits, when the unchanged layout was kept: allocator.inference.branch_unchanged)
    branch: int = 0
    branch_fits: list[float] = field(default_factory=list)  # per branch tried: log-likelihood of the newest tokens
    # token spans of the children LensNet's own zoom (branch 0) passed over when it descended (descend first: the
    # runner-up at each descent), top down; the sibling branches' starts (allocator.inference.branch_siblings)
    passed_over: list[tuple[int, int]] = field(default_factory=list)
    # allocator.inference.refocus_check: the base's fit of the k tokens after this refocus under its layout, then under
    # the layout it would have left with no edit (empty until checked), and whether that one was kept (edits undone)
    check_fits: list[float] = field(default_factory=list)
    reverted: bool = False
    # a question's refocus after a prompt started from a new session's layout (InferenceSession.relayout_after_prompt)
    relaid: bool = False


@dataclass
class PendingCheck:
    """A refocus waiting for its check (``allocator.inference.refocus_check``): the layout and allocator state the
    session would hold had the refocus made no edit, and the sizes of the appends since, to replay on them."""

    record: RefocusRecord
    wc: WorkingContext
    allocator: FocusAllocator
    chunks: list[int] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return sum(self.chunks)


class InferenceSession:
    """A growing history (any length) viewed through a fixed-budget working context."""

    def __init__(self, cfg: RunConfig, gist_fn: GistFn, *, dim: int, device: torch.device):
        mc = cfg.mc
        self.cfg = cfg
        self.device = device
        self.tree = LifetimeGistTree(mc.block_size, mc.max_lod, dim, gist_fn, device=device)
        self.allocator = FocusAllocator(cfg.allocator)
        # Fixed capacity = the largest bucket: every materialisation reuses the same storage.
        self.buffer = WCBuffer(max(mc.bucket_ladder), dim, device=device)
        self.wc: WorkingContext | None = None
        self.tokens_since_refocus = 0
        self.refocus_log: list[RefocusRecord] = []
        self.index_keys = SessionKeys()  # LensNet's token-index keys, made once per token (mc.nets.token_index)
        self.check: PendingCheck | None = None  # the last refocus with edits, until checked (refocus_check)

    @property
    def num_tokens(self) -> int:
        return self.tree.num_tokens

    def _wc_kwargs(self, max_lod: int) -> dict:
        mc = self.cfg.mc
        return dict(block_size=mc.block_size, max_lod=max_lod, max_entries=mc.max_entries,
                    recent_tokens=mc.recent_tokens)

    def extend(self, token_ids: Tensor, token_embeds: Tensor) -> None:
        """Append tokens to the tree and the working context, all or nothing.

        The first append builds the working context from the whole history (recency-graded
        layout). Later appends add the new tokens as the tail will be *after* the append (tokens a
        long chunk pushes past the tail enter as coarse nodes), then make room by collapsing the
        lowest-value sibling groups; the groups the new tokens make collapsible are available. When
        the budget cannot hold the history at the current depth, tree and working context grow a
        level first (:func:`mc.working_context.layout_depth`), so every history up to
        :func:`mc.working_context.capacity_tokens` fits. Any failure (a gist function that raises,
        a history past the capacity) leaves tree, working context, allocator marks and the refocus
        clock exactly as they were, and re-raises.
        """
        n = int(token_ids.shape[0])
        if n == 0:
            return
        mc = self.cfg.mc
        total = self.tree.num_tokens + n
        # Checked before anything changes: the depth this history needs (ValueError past capacity).
        depth = layout_depth(total, block_size=mc.block_size, min_lod=self.tree.max_lod,
                             max_entries=mc.max_entries, recent_tokens=mc.recent_tokens, room=mc.focus_room)
        tree_mark = self.tree.mark()
        try:
            self.tree.append(token_ids, token_embeds)
            while self.tree.max_lod < depth:
                self.tree.grow_level()
            wc, allocator = self._layout_append(self.wc, self.allocator, total, n, depth)
        except BaseException:
            self.tree.rollback(tree_mark)
            raise
        self.wc, self.allocator = wc, allocator
        self.tokens_since_refocus += n
        if self.check is not None:
            self.check.chunks.append(n)

    def _layout_append(self, wc: WorkingContext | None, allocator: FocusAllocator, total: int, n: int,
                       depth: int) -> tuple[WorkingContext, FocusAllocator]:
        """Copies of ``wc`` and ``allocator`` after ``n`` tokens are appended (``total`` in all, ``depth`` levels):
        the layout's side of :meth:`extend`, which :meth:`replay_layout` repeats on another layout."""
        fresh = wc is None
        allocator = allocator.copy()
        if fresh:
            wc = WorkingContext.build(total, fill=True, **self._wc_kwargs(depth))
        else:
            wc = wc.copy()
            while wc.max_lod < depth:
                wc.grow_level()
            wc.append_tokens(n, over_budget=True)
            allocator.make_room(wc, 0)
        # One token onto a valid context (a decode step) needs no O(W) walk: append_tokens adds one LOD0
        # entry after the others (the tail start only moves forward, so every gist stays outside the tail),
        # make_room's collapses are each checked by WorkingContext.collapse and it ends within the budget,
        # so the invariants hold by construction (the walk was ~10% of a decode step's host time).
        if fresh or n > 1:
            wc.validate()
        return wc, allocator

    def replay_layout(self, wc: WorkingContext, allocator: FocusAllocator,
                      chunks: list[int]) -> tuple[WorkingContext, FocusAllocator]:
        """``wc`` and ``allocator`` (copies) after the appends of the newest ``sum(chunks)`` tokens, one
        :meth:`extend` per chunk as they came: the layout another state of this session would hold now. The tree is
        not touched (it holds those tokens already); the depth each append needed is re-derived as extend derives it."""
        mc = self.cfg.mc
        total = self.num_tokens - sum(chunks)
        for n in chunks:
            total += n
            depth = layout_depth(total, block_size=mc.block_size, min_lod=wc.max_lod, max_entries=mc.max_entries,
                                 recent_tokens=mc.recent_tokens, room=mc.focus_room)
            wc, allocator = self._layout_append(wc, allocator, total, n, depth)
        return wc, allocator

    def relayout_after_prompt(self) -> bool:
        """Before a question's refocus (not a scheduled one): when the session has refocused before and at least
        ``allocator.inference.refocus_interval`` tokens came in since (a prompt), the working context becomes the
        layout a new session over the same history starts from (recency-graded, ``mc.focus_room`` free), the
        allocator's cooldown marks are cleared and a pending refocus check is dropped. Returns whether it did.

        Why: the appends since the last refocus only collapse what they must, oldest first, and skip the blocks that
        refocus opened while they cool down (a cooldown counts refocuses, and a prompt appended in one piece makes
        none). So after a long prompt the old zoom is still raw, nothing but it is left to trade, and the question's
        refocus cannot open anything: a second question was answered with the first one's value (obsidian
        Inference, "A later question")."""
        if not self.refocus_log or self.tokens_since_refocus < self.cfg.allocator.inference.refocus_interval:
            return False
        # the tree already has the depth a new session over this history would build (extend grows it to that)
        self.wc, self.allocator = self._layout_append(None, FocusAllocator(self.cfg.allocator), self.num_tokens, 0,
                                                      self.tree.max_lod)
        self.check = None
        return True

    def check_due(self) -> bool:
        """Whether a refocus with edits waits for its check and ``allocator.inference.refocus_check`` tokens are in."""
        return self.check is not None and self.check.tokens >= self.cfg.allocator.inference.refocus_check

    def snapshot(self) -> tuple:
        """The state appends and refocuses change, for :meth:`restore`: the tree's mark, copies of the working
        context and the allocator, the refocus clock and the log's length. Why: the evaluation reads one
        document with several focus policies; restoring a snapshot of the built session gives each policy the
        same start without gisting the whole history again (most of the sweep's time before)."""
        wc = None if self.wc is None else self.wc.copy()
        check = None if self.check is None else replace(self.check, chunks=list(self.check.chunks))
        return self.tree.mark(), wc, self.allocator.copy(), self.tokens_since_refocus, len(self.refocus_log), check

    def restore(self, snap: tuple) -> None:
        """Return to the state :meth:`snapshot` recorded; the snapshot stays valid for another restore."""
        mark, wc, allocator, tokens_since_refocus, n_log, check = snap
        self.tree.rollback(mark)
        self.wc = None if wc is None else wc.copy()
        self.allocator = allocator.copy()
        self.tokens_since_refocus = tokens_since_refocus
        del self.refocus_log[n_log:]
        # the pending check's layout is never changed in place (replay_layout copies): shared; its chunks are not
        self.check = None if check is None else replace(check, chunks=list(check.chunks))

    def materialize(self) -> MaterializedWC:
        if self.wc is None:
            raise RuntimeError("the session is empty: call begin_session(prompt_ids) with at least one token first")
        return materialize(self.wc, self.tree, self.buffer, self.cfg.mc.bucket_ladder)

    def history(self) -> Tensor:
        """All token ids appended so far ``[num_tokens]``."""
        return self.tree.token_ids()
