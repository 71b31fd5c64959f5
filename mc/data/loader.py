"""Token batches for training and evaluation: random windows, sources, and the stage-2 mix.

* :class:`TokenStream` views a :class:`~mc.data.documents.DocumentSet` as one cyclic stream of
  ``[BOS] doc [EOS] [BOS] doc [EOS] ...`` and cuts ``[B, T]`` windows at random offsets drawn
  from a ``torch.Generator``, so a window may span several short documents (stream style) and
  only the documents it touches are read.
* A *source* (:class:`CorpusSource` over stdlib/local files, :class:`RecallSource` generating
  recall documents) has ``sample_batch(batch_size, seq_len, generator) -> LongTensor [B, T]``;
  :func:`make_source` builds one from a :class:`~mc.config.DataConfig`.
* :class:`Stage2Sampler` mixes recall documents (share ``recall_mix``) with corpus windows and
  returns per-row metadata (:class:`Stage2Batch`) for the stage-2 loss and evaluation.

Everything is deterministic for a given generator state; no global RNG is touched.
"""
from __future__ import annotations

import bisect
import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor

from mc.config import DataConfig, RecallConfig
from mc.data.documents import DocumentSet
from mc.data.haystack import CorpusHaystack
from mc.data.local_files import load_documents
from mc.data.recall import RecallDoc, fit_recall, make_recall_doc, recall_batch
from mc.data.split import check_split, stable_fraction
from mc.data.stdlib_corpus import relative_key, stdlib_files, stdlib_root
from mc.data.tokenizer import ByteTokenizer


def _check_shape(batch_size: int, seq_len: int) -> None:
    for name, v in (("batch_size", batch_size), ("seq_len", seq_len)):
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise ValueError(f"{name}={v!r} is invalid: expected a positive integer")


class TokenStream:
    """Documents concatenated into one cyclic token stream; windows at random offsets."""

    def __init__(self, docs: DocumentSet):
        if len(docs) == 0:
            raise ValueError(f"corpus {docs.name!r} has no documents; nothing to sample")
        self.docs = docs
        self.starts = [0]  # stream offset of each document's BOS
        for i in range(len(docs)):
            self.starts.append(self.starts[-1] + docs.num_tokens(i))
        self.total = self.starts.pop()

    def window(self, start: int, seq_len: int) -> Tensor:
        """``[seq_len]`` long: stream tokens from ``start``, wrapping to the start when needed."""
        out = torch.empty(seq_len, dtype=torch.long)
        filled = 0
        pos = start % self.total
        doc = bisect.bisect_right(self.starts, pos) - 1
        while filled < seq_len:
            toks = self.docs.tokens(doc)
            off = pos - self.starts[doc]
            if len(toks) != self.docs.num_tokens(doc):  # a non-byte tokenizer: same relative place in the document
                off = off * len(toks) // self.docs.num_tokens(doc)
            take = min(len(toks) - off, seq_len - filled)
            out[filled:filled + take] = toks[off:off + take]
            filled += take
            doc = (doc + 1) % len(self.docs)
            pos = self.starts[doc]
        return out

    def sample_batch(self, batch_size: int, seq_len: int, generator: torch.Generator | None = None) -> Tensor:
        """``[B, T]`` long windows at uniform random offsets (no wrap when the stream is long enough)."""
        _check_shape(batch_size, seq_len)
        high = self.total - seq_len + 1 if self.total >= seq_len else self.total
        starts = torch.randint(0, high, (batch_size,), generator=generator).tolist()
        return torch.stack([self.window(s, seq_len) for s in starts])


class CorpusSource:
    """Random windows from one split of a document corpus (stdlib or local files)."""

    def __init__(self, docs: DocumentSet, split: str, val_fraction: float):
        check_split(split)
        self.split = split
        self.all_docs = docs
        self.docs = docs.split(split, val_fraction)
        self.name = docs.name
        self.stream = TokenStream(self.docs)

    def sample_batch(self, batch_size: int, seq_len: int, generator: torch.Generator | None = None) -> Tensor:
        return self.stream.sample_batch(batch_size, seq_len, generator)

    def shard(self, rank: int, world: int) -> "CorpusSource":
        """A copy reading only documents ``i % world == rank`` of this split (distributed training:
        ranks read disjoint documents; see obsidian "Distributed training")."""
        _check_shard(rank, world)
        if world == 1:
            return self
        idx = list(range(rank, len(self.docs), world))
        if not idx:
            raise ValueError(f"corpus {self.name!r} ({self.split}) has {len(self.docs)} documents, fewer than the "
                             f"{world} ranks: use fewer processes (--nproc) or a larger corpus")
        out = object.__new__(CorpusSource)
        out.__dict__.update(self.__dict__)
        out.docs = self.docs.subset(idx, name=f"{self.docs.name}:shard{rank}of{world}")
        out.stream = TokenStream(out.docs)
        return out

    def fingerprint(self) -> dict:
        """Fingerprint of the whole corpus (both splits) plus this split's size."""
        fp = dict(self.all_docs.fingerprint())
        fp.update(source=self.name, split=self.split, split_docs=len(self.docs), split_bytes=self.docs.total_bytes())
        return fp


def _check_shard(rank: int, world: int) -> None:
    if not (isinstance(world, int) and world >= 1 and isinstance(rank, int) and 0 <= rank < world):
        raise ValueError(f"shard rank={rank!r} of world={world!r} is invalid: expected 0 <= rank < world")


def _recall_seed(split: str, k: int) -> int:
    # train and val draw from disjoint seed namespaces, so no held-out document is trained on
    return int(stable_fraction(f"recall:{split}:{k}") * 2**62)


class RecallSource:
    """Generated recall documents; document ``k`` of a split is fixed (see :meth:`doc`)."""

    def __init__(self, cfg: RecallConfig, split: str, tokenizer=None, *, shifted_min: int = 0, haystack=None):
        check_split(split)
        self.cfg = cfg
        self.haystack = haystack  # None = the word filler; a corpus haystack of this split (mc.data.haystack)
        self.shifted_min = shifted_min  # > 0: rows are shifted documents (stage 1, recall.stage1_min_tokens)
        self.tokenizer = tokenizer  # None = bytes; else e.g. the model=hf tokenizer (mc.data.hf_tokenizer)
        self.split = split
        self.name = "recall"
        self.rank, self.world = 0, 1  # shard: this source draws document ids k * world + rank only

    def shard(self, rank: int, world: int) -> "RecallSource":
        """A copy drawing only the documents ``k * world + rank``: disjoint across ranks."""
        _check_shard(rank, world)
        out = RecallSource(self.cfg, self.split, self.tokenizer, shifted_min=self.shifted_min, haystack=self.haystack)
        out.rank, out.world = rank, world
        return out

    def doc(self, k: int, seq_len: int | None = None) -> RecallDoc:
        """The ``k``-th document of this split (length ``seq_len``, default ``cfg.doc_tokens``)."""
        cfg = self.cfg if seq_len is None else dataclasses.replace(self.cfg, doc_tokens=seq_len)
        return make_recall_doc(cfg, _recall_seed(self.split, k), self.tokenizer, self.haystack)

    def sample_docs(self, batch_size: int, seq_len: int, generator: torch.Generator | None = None):
        _check_shape(batch_size, seq_len)
        ks = torch.randint(0, 2**31 - 1, (batch_size,), generator=generator).tolist()
        # another length than the one the source was fitted to (mc.history_mix): fit the records to it too
        cfg = self.cfg if seq_len == self.cfg.doc_tokens else fit_recall(self.cfg, seq_len)
        return recall_batch(cfg, [_recall_seed(self.split, k * self.world + self.rank) for k in ks], self.tokenizer,
                            min_tokens=min(self.shifted_min, seq_len), haystack=self.haystack)

    def sample_batch(self, batch_size: int, seq_len: int, generator: torch.Generator | None = None) -> Tensor:
        return self.sample_docs(batch_size, seq_len, generator).ids

    def fingerprint(self) -> dict:
        return {"source": "recall", "split": self.split, **dataclasses.asdict(self.cfg), "shifted_min": self.shifted_min}


def make_source(cfg: DataConfig, split: str, *, max_files: int | None = None, tokenizer=None):
    """The source ``cfg.source`` ("stdlib", "files" or "recall") for ``split`` ("train"/"val").

    ``max_files`` caps the stdlib corpus (first files in sorted order) for quick runs and tests.
    ``tokenizer``: None = bytes; else the base's tokenizer (``mc.data.hf_tokenizer.tokenizer_for``).
    """
    check_split(split)
    if cfg.source == "stdlib":
        root = stdlib_root()
        paths = stdlib_files(root, max_files=max_files)
        docs = DocumentSet.from_paths(paths, [relative_key(p, root) for p in paths], name="stdlib", tokenizer=tokenizer)
        return CorpusSource(docs, split, cfg.val_fraction)
    if cfg.source == "files":
        found = load_documents(cfg.files_glob)
        docs = DocumentSet.from_texts([d.key for d in found], [d.text for d in found], name=f"files:{cfg.files_glob}",
                                       tokenizer=tokenizer)
        return CorpusSource(docs, split, cfg.val_fraction)
    if cfg.source == "recall":
        return RecallSource(cfg.recall, split, tokenizer)
    raise ValueError(f"data.source={cfg.source!r} is invalid: expected one of stdlib, files, recall")


def corpus_haystack(cfg: DataConfig, split: str, tokenizer=None, *, max_files: int | None = None) -> CorpusHaystack | None:
    """The haystack ``cfg.recall.haystack`` asks for on ``split`` (:mod:`mc.data.haystack`): None for ``words``
    (the default filler), else a :class:`CorpusHaystack` over ``cfg``'s corpus (stdlib or files) of that split."""
    if cfg.recall.haystack == "words":
        return None
    corpus = None if cfg.source == "recall" else make_source(cfg, split, max_files=max_files, tokenizer=tokenizer)
    return _haystack_over(cfg.recall, corpus, tokenizer)


def _haystack_over(recall_cfg: RecallConfig, corpus: CorpusSource | None, tokenizer) -> CorpusHaystack | None:
    """None for the word filler, else a corpus haystack over ``corpus`` (the whole split, before any sharding)."""
    if recall_cfg.haystack == "words":
        return None
    if corpus is None:
        raise ValueError("data.recall.haystack=corpus needs a corpus to cut filler from, but data.source=recall has "
                         "none; use data.source=stdlib or files, or data.recall.haystack=words")
    return CorpusHaystack(corpus.stream, tokenizer or ByteTokenizer())


def sample_batch(source, seq_len: int, batch_size: int, generator: torch.Generator | None = None) -> Tensor:
    """``[batch_size, seq_len]`` long from any source (contract spelling of ``source.sample_batch``)."""
    return source.sample_batch(batch_size, seq_len, generator)


@dataclass
class Stage2Batch:
    """A stage-2 batch; span tensors are ``[B]`` long and -1 on corpus rows."""

    tokens: Tensor        # [B, T] long
    is_recall: Tensor     # [B] bool
    query_start: Tensor   # [B] first token of the query "KEY="
    answer_start: Tensor  # [B] answer span = the last value_len tokens
    answer_end: Tensor    # [B]
    record_start: Tensor  # [B] span of the queried "KEY=VALUE" record
    record_end: Tensor    # [B]
    recall_docs: list[RecallDoc | None]

    def queried_spans(self) -> list[tuple[int, int] | None]:
        """Per row the queried record's token span (recall rows) or None (corpus rows): what stage 2's
        guided variants and focus loss use (``MCController.train_step(..., focus_spans)``)."""
        return [(int(s), int(e)) if r else None
                for s, e, r in zip(self.record_start.tolist(), self.record_end.tolist(), self.is_recall.tolist())]

    def query_ends(self) -> list[int | None]:
        """Per row the answer's first token (recall rows) or None (corpus rows): where a session would refocus, what
        the token index's training query reads up to (``MCController.train_step(..., query_ends)``)."""
        return [int(a) if r else None for a, r in zip(self.answer_start.tolist(), self.is_recall.tolist())]

    def other_record_spans(self) -> list[tuple[tuple[int, int], ...]]:
        """Per row the token spans of the records that are *not* queried (empty on corpus rows and
        one-record documents): what stage 2's decoy variants expand (``mc.decoy_variants``)."""
        return [() if d is None else tuple(sp for i, sp in enumerate(d.record_spans) if i != d.answer_record)
                for d in self.recall_docs]


class Stage2Sampler:
    """Rows ``[0, n_recall)`` are recall documents, the rest corpus windows, all of length T.

    ``n_recall = floor(B * recall_mix)`` plus one more with probability equal to the fraction
    left over, so the expected share is exactly ``recall_mix`` even for B = 1 or 2.
    """

    def __init__(self, corpus, recall_cfg: RecallConfig, recall_mix: float, split: str, tokenizer=None, *,
                 shifted_min: int = 0):
        if not 0.0 <= recall_mix <= 1.0:
            raise ValueError(f"recall_mix={recall_mix!r} is invalid: expected a number in [0, 1]")
        check_split(split)
        self.corpus = corpus
        self.recall = RecallSource(recall_cfg, split, tokenizer, shifted_min=shifted_min,
                                   haystack=_haystack_over(recall_cfg, corpus, tokenizer))
        self.recall_mix = float(recall_mix)

    def shard(self, rank: int, world: int) -> "Stage2Sampler":
        """A copy whose corpus and recall sources are rank ``rank``'s disjoint shard of ``world``."""
        _check_shard(rank, world)
        out = object.__new__(Stage2Sampler)
        out.__dict__.update(self.__dict__)
        out.corpus = None if self.corpus is None else self.corpus.shard(rank, world)
        out.recall = self.recall.shard(rank, world)
        return out

    def sample(self, batch_size: int, seq_len: int, generator: torch.Generator | None = None) -> Stage2Batch:
        _check_shape(batch_size, seq_len)
        exact = batch_size * self.recall_mix
        n_recall = int(exact)
        frac = exact - n_recall
        if frac > 0 and torch.rand((), generator=generator).item() < frac:
            n_recall += 1
        n_corpus = batch_size - n_recall
        neg = torch.full((batch_size,), -1, dtype=torch.long)
        query, a0, a1, r0, r1 = (neg.clone() for _ in range(5))
        rows: list[Tensor] = []
        docs: list[RecallDoc | None] = [None] * batch_size
        if n_recall:
            rb = self.recall.sample_docs(n_recall, seq_len, generator)
            rows.append(rb.ids)
            for t, src in ((query, rb.query_start), (a0, rb.answer_start), (a1, rb.answer_end),
                           (r0, rb.record_start), (r1, rb.record_end)):
                t[:n_recall] = src
            docs[:n_recall] = rb.docs
        if n_corpus:
            rows.append(self.corpus.sample_batch(n_corpus, seq_len, generator))
        is_recall = torch.zeros(batch_size, dtype=torch.bool)
        is_recall[:n_recall] = True
        return Stage2Batch(tokens=torch.cat(rows), is_recall=is_recall, query_start=query,
                           answer_start=a0, answer_end=a1, record_start=r0, record_end=r1, recall_docs=docs)


def make_stage2_sampler(cfg: DataConfig, split: str, *, max_files: int | None = None, tokenizer=None) -> Stage2Sampler:
    """Stage-2 mix for ``cfg``; with ``source=recall`` every row is a recall document."""
    if cfg.source == "recall":
        return Stage2Sampler(None, cfg.recall, 1.0, split, tokenizer)
    return Stage2Sampler(make_source(cfg, split, max_files=max_files, tokenizer=tokenizer), cfg.recall,
                         cfg.recall_mix, split, tokenizer)
