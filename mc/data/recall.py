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

That is the default. ``recall.haystack=corpus`` cuts the filler from the run's corpus instead,
``recall.templates`` gives other record shapes (``set KEY to VALUE``; the query repeats the text up to
the value), ``recall.key_lens`` mixes key lengths and ``recall.near_decoys`` makes the other keys one letter
away from the queried one (:mod:`mc.data.haystack`).

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
from mc.config_choices import RECALL_FORMS
from mc.data.haystack import (HAYSTACKS, KEY_ALPHABET, SEPARATOR, check_template, choose_template, draw_keys,
                              occurrences, query_prefix, realize_template, record_len, record_text, separator_span)
from mc.data.recall_doc import RecallDoc, cuts, filler_tokens
from mc.data.sentence_recall import check_sentence_config, make_sentence_doc
from mc.data.tokenizer import ByteTokenizer

VALUE_ALPHABET = string.digits


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
    if cfg.form not in RECALL_FORMS:
        raise ValueError(f"recall.form={cfg.form!r} is invalid: expected one of {', '.join(RECALL_FORMS)}")
    if cfg.haystack not in HAYSTACKS:
        raise ValueError(f"recall.haystack={cfg.haystack!r} is invalid: expected one of {', '.join(HAYSTACKS)}")
    if cfg.form == "sentence":  # its records are sentences: the template and key arithmetic below does not apply
        return check_sentence_config(cfg)
    if not cfg.templates:
        raise ValueError("recall.templates is empty: give at least one record template, e.g. ['{k}={v}']")
    templates = [*cfg.templates, *([cfg.eval_template] if cfg.eval_template else [])]
    for t in templates:
        check_template(t)
    if cfg.eval_template in cfg.templates:
        raise ValueError(f"recall.eval_template={cfg.eval_template!r} is also a training template; a held-out "
                         "template must not be in recall.templates")
    if SEPARATOR in cfg.eval_template:
        raise ValueError(f"recall.eval_template={cfg.eval_template!r} holds {SEPARATOR}: a held-out template is one "
                         "fixed record shape, e.g. '{k} is {v}'")
    for kl in cfg.key_lens:
        if not isinstance(kl, int) or isinstance(kl, bool) or kl <= 0:
            raise ValueError(f"recall.key_lens={list(cfg.key_lens)!r} is invalid: expected positive integers")
    key_lens = [cfg.key_len, *cfg.key_lens]
    if cfg.n_records > len(KEY_ALPHABET) ** min(key_lens):
        raise ValueError(f"recall.n_records={cfg.n_records} exceeds the {len(KEY_ALPHABET) ** min(key_lens)} "
                         f"unique keys of length {min(key_lens)}; raise recall.key_len")
    if cfg.near_decoys and cfg.n_records - 1 > min(key_lens) * (len(KEY_ALPHABET) - 1):
        raise ValueError(f"recall.near_decoys: {cfg.n_records - 1} keys one letter away from a {min(key_lens)}-letter "
                         "key do not exist; lower n_records or raise key_len")
    rec = max(record_len(t, kl, cfg.value_len) for t in templates for kl in key_lens)
    region = int(cfg.doc_tokens * cfg.records_region)
    need = 1 + cfg.n_records * (rec + 2)  # BOS + "\nRECORD\n" each
    if need > region:
        raise ValueError(f"{cfg.n_records} records need {need} tokens but the records region holds {region} "
                         f"(doc_tokens={cfg.doc_tokens} * records_region={cfg.records_region}); "
                         "raise doc_tokens or records_region, or lower n_records")
    query_len = rec + 1  # "\n" + the record's prefix and value
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


def assemble_ids(pieces: Sequence[int | str], rng: random.Random, tokenizer, length: int, haystack=None) -> Tensor:
    """``[length]`` long: BOS, then each piece in order: an int ``n`` is ``n`` filler tokens (the word filler, or
    ``haystack.ids``: :mod:`mc.data.haystack`), a str is one token per character (:meth:`char_ids`), so token
    positions are known before any text is encoded."""
    ids = [tokenizer.bos_id]
    for piece in pieces:
        if isinstance(piece, str):
            ids += tokenizer.char_ids(piece)
        else:
            ids += filler_tokens(rng, piece, tokenizer, haystack)
    if len(ids) != length:  # an invariant of the callers' arithmetic, not a user error
        raise RuntimeError(f"assembled {len(ids)} tokens for a {length}-token document")
    return torch.tensor(ids, dtype=torch.long)


def make_recall_doc(cfg: RecallConfig, seed: int, tokenizer=None, haystack=None, *,
                    template: str | None = None) -> RecallDoc:
    """One recall document of exactly ``cfg.doc_tokens`` tokens; same seed -> identical document.
    ``tokenizer``: the byte tokenizer when None, else e.g. a model=hf tokenizer (mc.data.hf_tokenizer).
    ``haystack``: the filler source (:mod:`mc.data.haystack`; None = the word filler), required when
    ``cfg.haystack == "corpus"``. ``template``: this record template instead of a draw from
    ``cfg.templates`` (the held-out ``cfg.eval_template`` in evaluation)."""
    tokenizer = tokenizer or ByteTokenizer()
    check_recall_config(cfg)
    if cfg.haystack == "corpus" and haystack is None:
        raise ValueError("recall.haystack=corpus needs a haystack: build one with "
                         "mc.data.loader.corpus_haystack(data_cfg, split)")
    if cfg.form == "sentence":  # English sentences in the tokenizer's own tokens (mc.data.sentence_recall)
        if template is not None:
            raise ValueError(f"template={template!r} shapes record-form documents; form=sentence draws its phrasings")
        return make_sentence_doc(cfg, seed, tokenizer, haystack)
    rng = random.Random(int(seed))
    return draw_unambiguous(lambda: _draw_recall_doc(cfg, rng, int(seed), tokenizer, haystack, template),
                            haystack, tokenizer, f"recall document seed {seed}")


# A corpus haystack can by chance hold a record's own prefix ("AB=" in real code): the document is drawn again
# from the same rng, so it stays fixed by its seed. Word filler never can (no capitals), so it is never checked.
_MAX_REDRAWS = 50


def draw_unambiguous(draw, haystack, tokenizer, what: str) -> RecallDoc:
    """``draw()`` until :func:`copy_is_unambiguous` (at once without a haystack); RuntimeError naming ``what``
    after ``_MAX_REDRAWS`` ambiguous draws in a row."""
    for _ in range(_MAX_REDRAWS):
        doc = draw()
        if haystack is None or copy_is_unambiguous(doc, tokenizer):
            return doc
    raise RuntimeError(f"{what}: the haystack repeated a record's prefix in {_MAX_REDRAWS} draws in a row; the "
                       "corpus is too small or too repetitive for a corpus haystack")


def copy_is_unambiguous(doc: RecallDoc, tokenizer) -> bool:
    """True when each record's prefix (``KEY=``) occurs before the query only at that record."""
    for (start, _), key, value in zip(doc.record_spans, doc.keys, doc.values):
        prefix = tokenizer.char_ids(query_prefix(doc.template, key))
        if occurrences(doc.ids, prefix, doc.query_start) != [start]:
            return False
    return True


def _draw_recall_doc(cfg: RecallConfig, rng: random.Random, seed: int, tokenizer, haystack,
                     template: str | None) -> RecallDoc:
    # Draw order matters: a config with one template, no key_lens and no near_decoys draws exactly what it
    # drew before those fields existed, so its documents (and every result on them) are unchanged.
    chosen = template or choose_template(rng, cfg.templates)
    tpl = realize_template(rng, chosen, [cfg.eval_template] if cfg.eval_template else ())
    kl = rng.choice(list(cfg.key_lens)) if cfg.key_lens else cfg.key_len
    n, vl = cfg.n_records, cfg.value_len
    if cfg.near_decoys and n > 1:
        first = draw_keys(rng, 1, kl)
        keys = first + draw_keys(rng, n - 1, kl, near_of=first[0], taken=set(first))
        rng.shuffle(keys)
        answer = keys.index(first[0])
        values = ["".join(rng.choice(VALUE_ALPHABET) for _ in range(vl)) for _ in range(n)]
    else:
        keys = draw_keys(rng, n, kl)
        values = ["".join(rng.choice(VALUE_ALPHABET) for _ in range(vl)) for _ in range(n)]
        answer = rng.randrange(n)

    region = int(cfg.doc_tokens * cfg.records_region)
    rec_len = record_len(tpl, kl, vl)
    slack = region - 1 - n * (rec_len + 2)
    gaps = cuts(rng, slack, n + 1)  # filler before each record; the last gap runs into the tail

    pieces: list[int | str] = []
    pos = 1  # after BOS; filler is counted in tokens, records are one token per character
    spans: list[tuple[int, int]] = []
    for i in range(n):
        pieces += [gaps[i], "\n"]
        pos += gaps[i] + 1
        pieces.append(record_text(tpl, keys[i], values[i]))
        spans.append((pos, pos + rec_len))
        pos += rec_len
        pieces.append("\n")
        pos += 1
    prefix = query_prefix(tpl, keys[answer])
    query = f"\n{prefix}{values[answer]}"
    tail = cfg.doc_tokens - pos - len(query)
    pieces += [tail, query]
    ids = assemble_ids(pieces, rng, tokenizer, cfg.doc_tokens, haystack)
    end = cfg.doc_tokens
    query_start = end - vl - len(prefix)
    return RecallDoc(ids=ids, keys=tuple(keys), values=tuple(values), record_spans=tuple(spans),
                     answer_record=answer, query_start=query_start, answer_span=(end - vl, end),
                     seed=seed, template=tpl, query_separator=separator_span(chosen, tpl, keys[answer], query_start))


def make_shifted_recall_doc(cfg: RecallConfig, seed: int, row_tokens: int, min_tokens: int,
                            tokenizer=None, haystack=None) -> RecallDoc:
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
    doc = make_recall_doc(fit_recall(cfg, length), seed, tokenizer, haystack)
    if length == row_tokens:
        return doc
    n = row_tokens - length
    tail = torch.tensor(filler_tokens(rng, n, tokenizer, haystack),
                        dtype=torch.long)
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


def recall_batch(cfg: RecallConfig, seeds: Sequence[int], tokenizer=None, *, min_tokens: int = 0,
                 haystack=None) -> RecallBatch:
    """Documents for ``seeds`` stacked into ``[B, doc_tokens]`` with their spans as tensors; with
    ``min_tokens > 0`` each row is a :func:`make_shifted_recall_doc` of ``doc_tokens`` tokens.
    ``haystack`` as in :func:`make_recall_doc`."""
    if len(seeds) == 0:
        raise ValueError("recall_batch needs at least one seed")
    if min_tokens > 0:
        docs = [make_shifted_recall_doc(cfg, s, cfg.doc_tokens, min_tokens, tokenizer, haystack) for s in seeds]
    else:
        docs = [make_recall_doc(cfg, s, tokenizer, haystack) for s in seeds]

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
