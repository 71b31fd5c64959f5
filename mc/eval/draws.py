"""Which held-out documents an evaluation reads: the evaluation draw.

Owns :func:`draw_seed` (the seed every evaluation document is generated or picked from: the main evaluation's
corpus windows and recall documents, its random controls, the long-range sweep and the task suite) and
:func:`fresh_draw` (what the workflow's eval stage and ``scripts/mc_eval.py`` call first).

Why a draw of its own: a result read on the same documents it was tuned on is not a result (obsidian
Evaluation, "Evaluation draws"). With ``eval.draw_seed`` unset the user-facing entry points draw a new seed
per evaluation, write it into ``eval.json`` and the report, and ``eval.draw_seed=N`` reads exactly those
documents again; tuning fixes its own validation draw and never reports it. Library calls with the field
unset (tests, benches) read what every evaluation read before the field existed: documents seeded by
``train.seed`` (the first validation recall documents for the main evaluation).
"""
from __future__ import annotations

import copy
import secrets

from mc.config import RunConfig

DRAW_RANGE = 1_000_000  # fresh draws lie in [0, DRAW_RANGE): short enough to type back as an override
RECALL_STRIDE = 10_000  # validation recall documents per draw (eval.n_docs is far below)


def draw_seed(cfg: RunConfig) -> int:
    """The seed this evaluation's documents come from: ``eval.draw_seed``, else ``train.seed``."""
    return cfg.eval.draw_seed if cfg.eval.draw_seed is not None else cfg.train.seed


def recall_doc_index(cfg: RunConfig, k: int) -> int:
    """Which validation recall document is the evaluation's ``k``-th: the first ones with the field unset (what
    every evaluation read before it existed), a block of its own per ``eval.draw_seed``."""
    if cfg.eval.draw_seed is None:
        return k
    return (cfg.eval.draw_seed + 1) * RECALL_STRIDE + k


def fresh_draw(cfg: RunConfig) -> RunConfig:
    """``cfg`` itself when ``eval.draw_seed`` is set, else a copy with a newly drawn one. The run's recorded
    config keeps the field unset (a drawn value there would make a resumed run's config differ); the drawn
    value goes into eval.json (``draw_seed``) and the report."""
    if cfg.eval.draw_seed is not None:
        return cfg
    out = copy.deepcopy(cfg)
    out.eval.draw_seed = secrets.randbelow(DRAW_RANGE)
    return out
