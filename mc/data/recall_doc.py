"""The recall document type and the word filler every generated document may use.

Owns :class:`RecallDoc` (a document with its records' spans, the queried one and the answer) and the
lowercase pseudo-text filler (:func:`filler_text`, :func:`filler_ids`, :func:`filler_tokens`) and the random
cut of a filler budget (:func:`cuts`), shared by the record form
(:mod:`mc.data.recall`), the long-range documents (:mod:`mc.data.long_tasks`) and sentence records
(:mod:`mc.data.sentence_recall`), so none of them imports another for these.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from torch import Tensor

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
    template: str = "{k}={v}"            # the record template (mc.data.haystack), its separator drawn
    query_separator: tuple[int, int] | None = None  # the query's drawn separator ("{s}"), None without one

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
        """Span of record ``i``'s value inside the document (record form: the value ends its record)."""
        if not self.template.endswith("{v}"):  # a sentence record (mc.data.sentence_recall): text follows the value
            raise ValueError(f"value_span reads record-form documents; this record is a sentence ({self.template!r})")
        end = self.record_spans[i][1]
        return end - len(self.values[i]), end

    def answer_ids(self) -> Tensor:
        """``[value_len]`` long: the target tokens."""
        return self.ids[self.answer_span[0]:self.answer_span[1]]


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


def filler_ids(rng: random.Random, n: int, tokenizer) -> list[int]:
    """Exactly ``n`` tokens of filler: the characters of :func:`filler_text` for the byte tokenizer (so byte
    documents are unchanged), else more filler text than needed, encoded and cut at ``n`` tokens."""
    if tokenizer.byte_level or n == 0:
        return tokenizer.encode_body(filler_text(rng, n))
    ids = tokenizer.encode_body(filler_text(rng, 3 * n + 8))
    while len(ids) < n:
        ids += tokenizer.encode_body(" " + filler_text(rng, n + 8))
    return ids[:n]


def filler_tokens(rng: random.Random, n: int, tokenizer, haystack=None) -> list[int]:
    """``n`` filler tokens: the word filler (:func:`filler_ids`) without a haystack, else ``haystack.ids`` (a corpus
    haystack, :class:`mc.data.haystack.CorpusHaystack`)."""
    return filler_ids(rng, n, tokenizer) if haystack is None else haystack.ids(rng, n, tokenizer)


def cuts(rng: random.Random, total: int, parts: int) -> list[int]:
    """Split ``total`` into ``parts`` non-negative integers (random composition)."""
    points = sorted(rng.randint(0, total) for _ in range(parts - 1))
    bounds = [0, *points, total]
    return [b - a for a, b in zip(bounds, bounds[1:])]
