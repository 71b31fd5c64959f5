"""The evaluation's held-out documents: windows of validation-split corpus documents and validation-seed recall
documents, both drawn from the run's evaluation draw (:mod:`mc.eval.draws`), as :class:`EvalDoc` rows.

Owns :func:`corpus_eval_docs` and :func:`recall_eval_docs`, which :mod:`mc.eval.evaluate` reads (and record probes
import from there too).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from mc.config import RunConfig
from mc.data.hf_tokenizer import tokenizer_for
from mc.data.split import VAL_SEED_OFFSET
from mc.eval.draws import draw_seed, recall_doc_index


@dataclass
class EvalDoc:
    source: str  # "corpus" | "recall"
    name: str
    ids: Tensor  # [N] long
    recall: object | None = None  # mc.data.recall.RecallDoc for recall documents


def corpus_eval_docs(cfg: RunConfig, n: int, doc_tokens: int, *, max_files: int | None = None) -> tuple[list[EvalDoc], str]:
    """``n`` windows of ``doc_tokens`` tokens from distinct validation-split documents that are at
    least that long (window start seeded); falls back to stream windows when too few are."""
    if cfg.data.source == "recall":
        return [], "data.source=recall: no corpus; only recall documents are evaluated"
    from mc.data.loader import make_source  # noqa: PLC0415 - corpus scanning only when needed

    src = make_source(cfg.data, "val", max_files=max_files, tokenizer=tokenizer_for(cfg.model))
    docs = src.docs
    long_ = [i for i in range(len(docs)) if docs.num_tokens(i) >= doc_tokens]
    g = torch.Generator().manual_seed(draw_seed(cfg) + VAL_SEED_OFFSET)
    order = torch.randperm(len(long_), generator=g).tolist()
    out = []
    for j in order:
        if len(out) == n:
            break
        i = long_[j]
        toks = docs.tokens(i)
        if toks.numel() < doc_tokens:  # num_tokens counts bytes; a model=hf tokenizer's encoding is shorter
            continue
        start = int(torch.randint(0, toks.numel() - doc_tokens + 1, (1,), generator=g))
        out.append(EvalDoc("corpus", f"{docs.keys[i]}@{start}", toks[start:start + doc_tokens].clone()))
    note = f"{len(out)} windows of distinct {docs.name} documents >= {doc_tokens} tokens"
    if len(out) < n:
        extra = src.stream.sample_batch(n - len(out), doc_tokens, g)
        out += [EvalDoc("corpus", f"{docs.name}:stream#{k}", row) for k, row in enumerate(extra)]
        note += f"; {n - len(out) + len(extra)} stream windows (spanning documents) made up the rest"
    return out, note


def recall_eval_docs(cfg: RunConfig, n: int, doc_tokens: int) -> list[EvalDoc]:
    """Validation-seed recall documents (a seed namespace disjoint from training's)."""
    from mc.data.loader import RecallSource, corpus_haystack  # noqa: PLC0415
    tok = tokenizer_for(cfg.model)
    src = RecallSource(cfg.data.recall, "val", tok, haystack=corpus_haystack(cfg.data, "val", tok))
    docs = [src.doc(recall_doc_index(cfg, k), seq_len=doc_tokens) for k in range(n)]
    return [EvalDoc("recall", f"recall:val#{k}", d.ids, d) for k, d in enumerate(docs)]
