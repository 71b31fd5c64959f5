"""Recall documents whose records are English sentences in the tokenizer's own tokens (``data.recall.form=sentence``).

Owns the training-side twin of the task suite's needles (:mod:`mc.data.real_tasks`). The project's record form
(``KEY=VALUE``, one token per character, :mod:`mc.data.recall`) suits the byte-level base that stage 1 teaches to
copy it; a real model reads characters spelled one token each as noise and does not copy from them reliably, so a
LensNet trained over it learns no locator that carries to sentences (obsidian Training, "Sentence records"). Here
a record is a sentence such as "The locker number of Clara is 48213." under a person's name, encoded as the model
would encode the text; the document ends with a question in the same phrasing and the value's digits:

    [BOS] filler \\n SENTENCE \\n filler \\n SENTENCE \\n ... filler \\n QUESTION " " D D D D D
          |<------------- first records_region of the document ------------>|      |answer|

The phrasings, names and numbers are disjoint from the suite's (no "pass key", no "special magic number", no
suite key word), so the suite stays a held-out form. ``n_records`` sentences share one phrasing under distinct
names (the others are distractors, as in RULER's multi-key needle); the value is ``value_len`` digits, which must
be one token each so the answer is the document's last ``value_len`` tokens (:class:`~mc.data.recall.RecallDoc`
as every other recall document). ``key_len``, ``templates``, ``eval_template`` and ``near_decoys`` belong to the
record form and are not read. Same config, seed, tokenizer and filler -> the same document.
"""
from __future__ import annotations

import random

import torch

from mc.data.recall_doc import RecallDoc, cuts, filler_tokens

# (record sentence, question): "{k}" a name, "{v}" the value; the question ends where the value's digits begin.
PHRASINGS = (
    ("The locker number of {k} is {v}.", "What is the locker number of {k}? The locker number of {k} is"),
    ("Remember this: the access code for {k} is {v}.", "What is the access code for {k}? The access code for {k} is"),
    ("{k} wrote down the room number {v} and kept it.", "Which room number did {k} write down? {k} wrote down "
                                                        "the room number"),
    ("The ticket that {k} bought has the number {v}.", "What number does the ticket of {k} have? The ticket that "
                                                       "{k} bought has the number"),
    ("According to the records, {k} was given the badge number {v}.", "Which badge number was {k} given? {k} was "
                                                                        "given the badge number"),
    ("Please note that the order placed by {k} is number {v}.", "What is the number of the order placed by {k}? "
                                                                "The order placed by {k} is number"),
)
NAMES = ("Alice", "Bruno", "Clara", "Dmitri", "Elena", "Farid", "Greta", "Hiro", "Ines", "Jonas", "Kira", "Luca",
         "Mira", "Nadia", "Omar", "Petra", "Quinn", "Rosa", "Sven", "Talia", "Ulrich", "Vera", "Wanda", "Yusuf")
MAX_VALUE_LEN = 12


def check_sentence_config(cfg) -> None:
    """ValueError naming the field when ``cfg`` (a ``RecallConfig`` with ``form="sentence"``) cannot be drawn."""
    if not 0 < cfg.value_len <= MAX_VALUE_LEN:
        raise ValueError(f"recall.value_len={cfg.value_len} is invalid for form=sentence: expected 1..{MAX_VALUE_LEN} "
                         "digits")
    if cfg.n_records > len(NAMES):
        raise ValueError(f"recall.n_records={cfg.n_records} exceeds the {len(NAMES)} names sentence records draw "
                         "from; lower it")
    if cfg.eval_template or cfg.near_decoys:
        raise ValueError("recall.eval_template and recall.near_decoys shape record-form documents; form=sentence "
                         "does not read them (its held-out form is the task suite's): leave them unset")


def answer_ids(tokenizer, value: str) -> list[int]:
    """The tokens that follow the question: the value after a space, its digits one token each (checked)."""
    ids = tokenizer.encode_body(" " + value)
    if len(ids) < len(value) or [tokenizer.decode([i]) for i in ids[-len(value):]] != list(value):
        raise ValueError(f"the tokenizer encodes {value!r} as {len(ids)} tokens, not one token per digit; "
                         "form=sentence needs the answer's digits as its last value_len tokens (use form=record)")
    return ids


def make_sentence_doc(cfg, seed: int, tokenizer, haystack=None) -> RecallDoc:
    """One sentence-record document of exactly ``cfg.doc_tokens`` tokens (see the module docstring). ``haystack``:
    the corpus filler (:class:`mc.data.haystack.CorpusHaystack`), None for the word filler."""
    check_sentence_config(cfg)
    rng = random.Random(int(seed) ^ 0x5E47E7CE)
    record, question = PHRASINGS[rng.randrange(len(PHRASINGS))]
    n, vl = cfg.n_records, cfg.value_len
    keys = rng.sample(NAMES, n)
    values = ["".join(rng.choice("0123456789") for _ in range(vl)) for _ in range(n)]
    answer = rng.randrange(n)
    needles = [tokenizer.encode_body("\n" + record.format(k=k, v=v) + "\n") for k, v in zip(keys, values)]
    tail = tokenizer.encode_body("\n" + question.format(k=keys[answer])) + answer_ids(tokenizer, values[answer])
    region = int(cfg.doc_tokens * cfg.records_region)
    slack = region - 1 - sum(map(len, needles))
    rest = cfg.doc_tokens - region - len(tail)
    if slack < 0 or rest < 0:
        raise ValueError(f"{n} sentence records ({sum(map(len, needles))} tokens) and the question ({len(tail)}) do "
                         f"not fit a {cfg.doc_tokens}-token document with records_region={cfg.records_region}; raise "
                         "doc_tokens or lower n_records")
    gaps = cuts(rng, slack, n + 1)[:n]  # filler before each record; the rest runs to the question
    ids, spans = [tokenizer.bos_id], []
    for gap, needle in zip(gaps, needles):
        ids += filler_tokens(rng, gap, tokenizer, haystack)
        spans.append((len(ids), len(ids) + len(needle)))
        ids += needle
    ids += filler_tokens(rng, cfg.doc_tokens - len(ids) - len(tail), tokenizer, haystack)
    query_start = len(ids) + 1  # after the question's newline
    ids += tail
    if len(ids) != cfg.doc_tokens:  # the arithmetic above is exact; this guards the invariant
        raise RuntimeError(f"built {len(ids)} tokens for a {cfg.doc_tokens}-token sentence document")
    end = cfg.doc_tokens
    return RecallDoc(ids=torch.tensor(ids, dtype=torch.long), keys=tuple(keys), values=tuple(values),
                     record_spans=tuple(spans), answer_record=answer, query_start=query_start,
                     answer_span=(end - vl, end), seed=int(seed), template=record)
