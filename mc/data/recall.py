"""The generated long-range recall task: records early in a long document, a query at its end.

Layout of one document of exactly ``doc_tokens`` byte tokens (seeded, deterministic)::

    [BOS] filler \\n KEY=VALUE \\n filler \\n KEY=VALUE \\n ... filler ... \\n KEY=VALUE
          |<------ first records_region of the document ------>|            |query|answer|

* ``n_records`` records ``KEY=VALUE`` sit inside ``[1, int(doc_tokens * records_region))``,
  separated by filler of random lengths. Keys are ``key_len`` uppercase letters, unique within a
  document; values are ``value_len`` digits.
* Filler is pseudo-text made of lowercase words and punctuation, so neither a key (uppercase)
  nor a value (digits) ever appears in it by accident: the record is the only place the answer
  can come from.
* The document ends with ``\\nKEY=`` for one record's key followed by that record's value, so
  the answer is exactly the last ``value_len`` tokens (``answer_span``) and the model must
  predict them from the record placed far back. The query repeats the record's own ``KEY=``
  prefix, so answering is a pure copy (an induction-head match on the key), which a small base
  model can learn in a short stage 1; a different query marker (``KEY?``) would additionally
  require learning that ``?`` stands for ``=``.

A :class:`RecallDoc` carries the exact token spans of every record, which one is queried, the
query start and the answer span, so evaluation can score exact recall and training can find the
block holding the queried record (``span_blocks(doc.queried_span, K)``).
"""
from __future__ import annotations

import dataclasses
import random
import string
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor

from mc.config import RecallConfig
from mc.data.tokenizer import ByteTokenizer

KEY_ALPHABET = string.ascii_uppercase
VALUE_ALPHABET = string.digits
_WORDS = (
    "the a of and to in is it that for on with as was be by at this from or an are not have "
    "which one all were when we there can had more if will each about how up out them then she "
    "many some so these would other into has her two like him see time could no make than first "
    "been its who now people my made over did down only way find use may water long little very "
    "after words called just where most know get through back much before go good new write our "
    "used me man too any day same right look think also around another came come work three word "
    "must because does part even place well such here take why things help put years different "
    "away again off went old number great tell men say small every found still between name should "
    "home big give air line set own under read last never us left end along while might next sound "
    "below saw something thought both few those always looked show large often together asked house"
).split()


@dataclass(frozen=True)
class RecallDoc:
    """One recall document. Spans are ``(start, end)`` token indices, end exclusive."""

    ids: Tensor                          # [doc_tokens] long (a shifted document: [row_tokens]), ids[0] == BOS
    keys: tuple[str, ...]                # [n_records]
    values: tuple[str, ...]              # [n_records]
    record_spans: tuple[tuple[int, int], ...]  # span of each "KEY=VALUE"
    answer_record: int                   # index of the queried record
    query_start: int                     # first token of the query "KEY=" (after its newline)
    answer_span: tuple[int, int]         # the last value_len tokens
    seed: int

    @property
    def num_tokens(self) -> int:
        return int(self.ids.numel())

    @property
    def answer(self) -> str:
        return self.values[self.answer_record]

    @property
    def queried_span(self) -> tuple[int, int]:
        """Span of the queried record ``KEY=VALUE``."""
        return self.record_spans[self.answer_record]

    def value_span(self, i: int) -> tuple[int, int]:
        """Span of record ``i``'s value inside the document."""
        end = self.record_spans[i][1]
        return end - len(self.values[i]), end

    def answer_ids(self) -> Tensor:
        """``[value_len]`` long: the target tokens."""
        return self.ids[self.answer_span[0]:self.answer_span[1]]


def span_blocks(span: tuple[int, int], block_size: int) -> range:
    """Indices of the LOD0 blocks of ``block_size`` tokens that a span touches (start // K ..)."""
    start, end = span
    if block_size <= 0 or end <= start:
        raise ValueError(f"span_blocks needs block_size > 0 and a non-empty span, got {span}, K={block_size}")
    return range(start // block_size, (end - 1) // block_size + 1)


def check_recall_config(cfg: RecallConfig) -> None:
    """ValueError naming the field when the document cannot hold the records and the query."""
    for k in ("doc_tokens", "n_records", "key_len", "value_len"):
        v = getattr(cfg, k)
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise ValueError(f"recall.{k}={v!r} is invalid: expected a positive integer")
    if not 0.0 < cfg.records_region < 1.0:
        raise ValueError(f"recall.records_region={cfg.records_region!r} is invalid: expected a number in (0, 1)")
    if cfg.n_records > len(KEY_ALPHABET) ** cfg.key_len:
        raise ValueError(f"recall.n_records={cfg.n_records} exceeds the {len(KEY_ALPHABET) ** cfg.key_len} "
                         f"unique keys of length {cfg.key_len}; raise recall.key_len")
    region = int(cfg.doc_tokens * cfg.records_region)
    need = 1 + cfg.n_records * (cfg.key_len + cfg.value_len + 3)  # BOS + "\nKEY=VALUE\n" each
    if need > region:
        raise ValueError(f"{cfg.n_records} records need {need} tokens but the records region holds {region} "
                         f"(doc_tokens={cfg.doc_tokens} * records_region={cfg.records_region}); "
                         "raise doc_tokens or records_region, or lower n_records")
    query_len = cfg.key_len + cfg.value_len + 2  # "\nKEY=VALUE"
    if region + query_len > cfg.doc_tokens:
        raise ValueError(f"the query ({query_len} tokens) does not fit after the records region "
                         f"({region} of {cfg.doc_tokens} tokens); lower records_region or raise doc_tokens")


def fit_recall(recall: RecallConfig, seq_len: int) -> RecallConfig:
    """``recall`` at ``doc_tokens=seq_len``; fewer records (at least one) when they would not fit."""
    cfg = dataclasses.replace(recall, doc_tokens=seq_len)
    while True:
        try:
            check_recall_config(cfg)
            return cfg
        except ValueError as e:
            if cfg.n_records <= 1:
                raise ValueError(f"recall documents cannot be {seq_len} tokens long: {e}") from e
            cfg = dataclasses.replace(cfg, n_records=cfg.n_records - 1)


def filler_text(rng: random.Random, n: int) -> str:
    """Exactly ``n`` characters of lowercase pseudo-text (no uppercase, digits, '=' or '?')."""
    parts: list[str] = []
    length = 0
    while length < n:
        w = rng.choice(_WORDS)
        r = rng.random()
        if r < 0.08:
            w += "."
        elif r < 0.14:
            w += ","
        sep = "\n" if r > 0.97 else " "
        parts.append(w + sep)
        length += len(w) + 1
    return "".join(parts)[:n]


def _cuts(rng: random.Random, total: int, parts: int) -> list[int]:
    """Split ``total`` into ``parts`` non-negative integers (random composition)."""
    points = sorted(rng.randint(0, total) for _ in range(parts - 1))
    bounds = [0, *points, total]
    return [b - a for a, b in zip(bounds, bounds[1:])]


def filler_ids(rng: random.Random, n: int, tokenizer) -> list[int]:
    """Exactly ``n`` tokens of filler: the characters of :func:`filler_text` for the byte tokenizer (so byte
    documents are unchanged), else more filler text than needed, encoded and cut at ``n`` tokens."""
    if tokenizer.byte_level or n == 0:
        return tokenizer.encode_body(filler_text(rng, n))
    ids = tokenizer.encode_body(filler_text(rng, 3 * n + 8))
    while len(ids) < n:
        ids += tokenizer.encode_body(" " + filler_text(rng, n + 8))
    return ids[:n]


def assemble_ids(pieces: Sequence[int | str], rng: random.Random, tokenizer, length: int) -> Tensor:
    """``[length]`` long: BOS, then each piece in order: an int ``n`` is ``n`` filler tokens, a str is one
    token per character (:meth:`char_ids`), so token positions are known before any text is encoded."""
    ids = [tokenizer.bos_id]
    for piece in pieces:
        ids += filler_ids(rng, piece, tokenizer) if isinstance(piece, int) else tokenizer.char_ids(piece)
    if len(ids) != length:  # an invariant of the callers' arithmetic, not a user error
        raise RuntimeError(f"assembled {len(ids)} tokens for a {length}-token document")
    return torch.tensor(ids, dtype=torch.long)


def make_recall_doc(cfg: RecallConfig, seed: int, tokenizer=None) -> RecallDoc:
    """One recall document of exactly ``cfg.doc_tokens`` tokens; same seed -> identical document.
    ``tokenizer``: the byte tokenizer when None, else e.g. a model=hf tokenizer (mc.data.hf_tokenizer)."""
    tokenizer = tokenizer or ByteTokenizer()
    check_recall_config(cfg)
    rng = random.Random(int(seed))
    n, kl, vl = cfg.n_records, cfg.key_len, cfg.value_len
    keys: list[str] = []
    seen: set[str] = set()
    while len(keys) < n:
        k = "".join(rng.choice(KEY_ALPHABET) for _ in range(kl))
        if k not in seen:
            seen.add(k)
            keys.append(k)
    values = ["".join(rng.choice(VALUE_ALPHABET) for _ in range(vl)) for _ in range(n)]
    answer = rng.randrange(n)

    region = int(cfg.doc_tokens * cfg.records_region)
    rec_len = kl + 1 + vl
    slack = region - 1 - n * (rec_len + 2)
    gaps = _cuts(rng, slack, n + 1)  # filler before each record; the last gap runs into the tail

    pieces: list[int | str] = []
    pos = 1  # after BOS; filler is counted in tokens, records are one token per character
    spans: list[tuple[int, int]] = []
    for i in range(n):
        pieces += [gaps[i], "\n"]
        pos += gaps[i] + 1
        pieces.append(f"{keys[i]}={values[i]}")
        spans.append((pos, pos + rec_len))
        pos += rec_len
        pieces.append("\n")
        pos += 1
    query = f"\n{keys[answer]}={values[answer]}"
    tail = cfg.doc_tokens - pos - len(query)
    pieces += [tail, query]
    ids = assemble_ids(pieces, rng, tokenizer, cfg.doc_tokens)
    end = cfg.doc_tokens
    return RecallDoc(ids=ids, keys=tuple(keys), values=tuple(values), record_spans=tuple(spans),
                     answer_record=answer, query_start=end - vl - 1 - kl, answer_span=(end - vl, end),
                     seed=int(seed))


def make_shifted_recall_doc(cfg: RecallConfig, seed: int, row_tokens: int, min_tokens: int,
                            tokenizer=None) -> RecallDoc:
    """A recall document of a seeded length ``L`` in ``[min_tokens, row_tokens]`` (records in its first
    ``records_region``, as many of ``n_records`` as fit in ``L``, at least one; the query and answer at
    its end) followed by ``row_tokens - L`` filler tokens.

    Stage 1 trains on these (``recall.stage1_min_tokens``): with full-length documents alone the query
    sits at one absolute position in every row, and a small base learns the copy *at that position*
    (it can count from BOS): cut such a document's first 16 tokens and its exact recall fell from
    39/40 to 3/40 (obsidian Training). Spans are absolute row indices, as in :func:`make_recall_doc`."""
    if not 0 < min_tokens <= row_tokens:
        raise ValueError(f"make_shifted_recall_doc needs 0 < min_tokens ({min_tokens}) <= row_tokens ({row_tokens})")
    tokenizer = tokenizer or ByteTokenizer()
    rng = random.Random(int(seed) ^ 0x5F3759DF)  # its own stream: the document itself stays make_recall_doc(seed)
    length = rng.randint(min_tokens, row_tokens)
    doc = make_recall_doc(fit_recall(cfg, length), seed, tokenizer)
    if length == row_tokens:
        return doc
    tail = torch.tensor(filler_ids(rng, row_tokens - length, tokenizer), dtype=torch.long)
    return dataclasses.replace(doc, ids=torch.cat([doc.ids, tail]))


@dataclass
class RecallBatch:
    """Recall documents stacked for a model; every span tensor is ``[B]`` long."""

    ids: Tensor            # [B, T] long
    query_start: Tensor    # [B]
    answer_start: Tensor   # [B]
    answer_end: Tensor     # [B]
    record_start: Tensor   # [B] span of the queried record
    record_end: Tensor     # [B]
    docs: list[RecallDoc]


def recall_batch(cfg: RecallConfig, seeds: Sequence[int], tokenizer=None, *, min_tokens: int = 0) -> RecallBatch:
    """Documents for ``seeds`` stacked into ``[B, doc_tokens]`` with their spans as tensors; with
    ``min_tokens > 0`` each row is a :func:`make_shifted_recall_doc` of ``doc_tokens`` tokens."""
    if len(seeds) == 0:
        raise ValueError("recall_batch needs at least one seed")
    if min_tokens > 0:
        docs = [make_shifted_recall_doc(cfg, s, cfg.doc_tokens, min_tokens, tokenizer) for s in seeds]
    else:
        docs = [make_recall_doc(cfg, s, tokenizer) for s in seeds]

    def col(f) -> Tensor:
        return torch.tensor([f(d) for d in docs], dtype=torch.long)
    return RecallBatch(ids=torch.stack([d.ids for d in docs]),
                       query_start=col(lambda d: d.query_start),
                       answer_start=col(lambda d: d.answer_span[0]), answer_end=col(lambda d: d.answer_span[1]),
                       record_start=col(lambda d: d.queried_span[0]), record_end=col(lambda d: d.queried_span[1]),
                       docs=docs)


def exact_recall(predicted: Tensor, answers: Tensor) -> Tensor:
    """``[B]`` bool: a row counts only when all ``value_len`` predicted tokens match."""
    if predicted.shape != answers.shape or predicted.dim() != 2:
        raise ValueError(f"exact_recall needs predicted and answers of the same [B, value_len] shape, "
                         f"got {tuple(predicted.shape)} and {tuple(answers.shape)}")
    return (predicted == answers).all(dim=1)
