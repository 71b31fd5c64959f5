"""Inference session state: one sequence's gist tree, working context and allocator clock.

The session holds data, not policy: the :class:`mc.controller.MCController` drives it (appends,
refocuses, generation) and is the only thing that runs GistNet/LensNet. Keeping the state here
lets the controller stay orchestration-only and makes a session easy to inspect in tests
(``session.wc.entries``, ``session.tree.level(1)``, ``session.history``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from mc.allocator import Edit, FocusAllocator
from mc.config import RunConfig
from mc.tree import GistFn, LifetimeGistTree
from mc.working_context import MaterializedWC, WCBuffer, WorkingContext, materialize


@dataclass
class RefocusRecord:
    """What one refocus did (kept for reports and LOD maps)."""

    num_tokens: int
    iterations: int  # allocator iterations actually run (stops early when no edit is chosen)
    edits: list[Edit] = field(default_factory=list)


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

    @property
    def num_tokens(self) -> int:
        return self.tree.num_tokens

    def _wc_kwargs(self) -> dict:
        mc = self.cfg.mc
        return dict(block_size=mc.block_size, max_lod=mc.max_lod, max_entries=mc.max_entries,
                    recent_tokens=mc.recent_tokens)

    def extend(self, token_ids: Tensor, token_embeds: Tensor) -> None:
        """Append tokens to the tree and the working context, making room when the budget is full.

        The first append builds the working context from the whole history (recency-graded
        layout); later appends add LOD0 entries in chunks of at most K tokens, collapsing the
        lowest-value sibling groups first when the budget would overflow.
        """
        n = int(token_ids.shape[0])
        if n == 0:
            return
        if self.wc is None:
            self.tree.append(token_ids, token_embeds)
            self.wc = WorkingContext.build(self.tree.num_tokens, fill=True, **self._wc_kwargs())
        else:
            step = self.cfg.mc.block_size
            for lo in range(0, n, step):
                hi = min(n, lo + step)
                self.tree.append(token_ids[lo:hi], token_embeds[lo:hi])
                if len(self.wc) + (hi - lo) > self.cfg.mc.max_entries:
                    self.allocator.make_room(self.wc, hi - lo)
                self.wc.append_tokens(hi - lo)
        self.tokens_since_refocus += n

    def materialize(self) -> MaterializedWC:
        if self.wc is None:
            raise RuntimeError("the session is empty: call begin_session(prompt_ids) with at least one token first")
        return materialize(self.wc, self.tree, self.buffer, self.cfg.mc.bucket_ladder)

    def history(self) -> Tensor:
        """All token ids appended so far ``[num_tokens]``."""
        return self.tree.token_ids()
