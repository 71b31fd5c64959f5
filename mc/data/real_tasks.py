"""Long-context tasks a real model can answer, for any tokenizer: passkey and RULER-style needles.

Owns the documents of the task suite (obsidian Evaluation, "Task suite"; the sweep is
:mod:`mc.eval.task_suite`). Each document is a haystack of real text (held-out windows of the
run's corpus, tokenized by the run's tokenizer, not random tokens) with needle sentences inserted
at token positions, and a question at the end whose answer the model writes itself:

* ``passkey`` (LongLoRA's form): "The pass key is N. Remember it. N is the pass key." with N in
  1..50000; the question ends "The pass key is"; the reference is N.
* ``multikey`` (RULER's multi-key needle): ``n_keys`` sentences "One of the special magic numbers
  for KEY is: VALUE." under distinct word keys, one queried; the others are distractors.
* ``multivalue`` (RULER's multi-value needle): ``n_keys`` such sentences under one key; every value
  is a reference.
* ``vartrack`` (RULER's variable tracking, one chain): "VAR A = N." then ``hops`` statements
  "VAR B = VAR A." in order; every variable of the chain is a reference.

``depth`` places the first needle (the queried one) as a fraction of the history before the
question (0: the start, 1: right before the question); the other needles go at seeded positions
(multikey, multivalue anywhere; vartrack's chain after the first, in order). Scoring is RULER's
``string_match_all`` (:func:`string_match_all`): the share of references found in the greedy
continuation. Same arguments and filler -> the same document, in every process.
"""
from __future__ import annotations

import random
import zlib
from dataclasses import dataclass

import torch
from torch import Tensor

from mc.config import TASK_SUITE_TASKS as REAL_TASKS

# Tokens each task's answer may take (a number, a few numbers, five variable names) before scoring.
ANSWER_TOKENS = {"passkey": 10, "multikey": 14, "multivalue": 48, "vartrack": 32}
# Keys of the magic-number needles: plain English words, distinct, none a substring of another.
KEY_WORDS = ("apple", "bridge", "candle", "desert", "engine", "forest", "garden", "harbor", "island", "jacket",
             "kettle", "ladder", "marble", "needle", "orchid", "pepper", "quartz", "rabbit", "saddle", "tunnel",
             "umbrella", "velvet", "window", "yellow", "zephyr", "anchor", "basket", "cactus", "dolphin", "falcon",
             "glacier", "hammer", "iceberg", "jungle", "lantern", "meadow", "nickel", "oyster", "parrot", "riddle")
VAR_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass(frozen=True)
class TaskDoc:
    """One document: ``ids`` = history + question (the model continues after it), the references it must write,
    the needles' token spans (what an oracle opens) and the question's start."""

    task: str
    ids: Tensor  # [length] long
    answers: tuple[str, ...]
    needle_spans: tuple[tuple[int, int], ...]  # the queried needle first
    # per needle, the tokens inside it that spell its part of the answer (the value, the variable's name):
    # what an oracle opens first when the budget cannot hold the whole sentence at LOD0
    answer_spans: tuple[tuple[int, int], ...]
    question_start: int
    depth: float
    seed: int


def string_match_all(prediction: str, references: tuple[str, ...] | list[str]) -> float:
    """RULER's score: the share of ``references`` found (case-insensitively) in ``prediction``, in [0, 1]."""
    if not references:
        raise ValueError("string_match_all needs at least one reference")
    low = prediction.lower()
    return sum(r.lower() in low for r in references) / len(references)


def _needles(task: str, rng: random.Random, n_keys: int, hops: int
             ) -> tuple[list[str], str, tuple[str, ...], list[str]]:
    """``(needle sentences, question, references, the answer's piece in each sentence)``; the queried needle
    is the first sentence."""
    if task == "passkey":
        n = rng.randint(1, 50_000)
        return ([f"The pass key is {n}. Remember it. {n} is the pass key."], "What is the pass key? The pass key is",
                (str(n),), [str(n)])
    if task in ("multikey", "multivalue"):
        values = rng.sample(range(1_000_000, 10_000_000), n_keys)
        pieces = [str(v) for v in values]
        if task == "multikey":
            keys = rng.sample(KEY_WORDS, n_keys)
            sentences = [f"One of the special magic numbers for {k} is: {v}." for k, v in zip(keys, values)]
            return (sentences, f"What is the special magic number for {keys[0]} mentioned in the provided text? "
                               f"The special magic number for {keys[0]} mentioned in the provided text is",
                    (pieces[0],), pieces)
        key = rng.choice(KEY_WORDS)
        sentences = [f"One of the special magic numbers for {key} is: {v}." for v in values]
        return (sentences, f"What are all the special magic numbers for {key} mentioned in the provided text? "
                           f"The special magic numbers for {key} mentioned in the provided text are",
                tuple(pieces), pieces)
    if task == "vartrack":
        names: list[str] = []
        while len(names) < hops + 1:
            name = "".join(rng.choice(VAR_LETTERS) for _ in range(5))
            if name not in names:
                names.append(name)
        value = rng.randint(10_000, 99_999)
        sentences = [f"VAR {names[0]} = {value}."] + [f"VAR {b} = VAR {a}." for a, b in zip(names, names[1:])]
        # sentence k names variable k ("VAR A = N." names A, "VAR B = VAR A." names B): its piece of the answer
        return (sentences, f"Find all variables that are assigned the value {value} in the text above. Answer: "
                           f"According to the chain of variable assignments in the text above, {hops + 1} variables "
                           f"are assigned the value {value}, they are:", tuple(names), list(names))
    raise ValueError(f"unknown task {task!r}; expected one of {', '.join(REAL_TASKS)}")


def make_task_doc(task: str, length: int, depth: float, seed: int, tokenizer, filler_ids: Tensor, *,
                  n_keys: int = 4, hops: int = 4) -> TaskDoc:
    """A ``task`` document of exactly ``length`` tokens over ``filler_ids`` (at least ``length`` tokens of real
    text, :func:`filler_window`); see the module docstring."""
    if not 0.0 <= depth <= 1.0:
        raise ValueError(f"depth must be in [0, 1] (a fraction of the history), got {depth}")
    if n_keys < 1 or hops < 1:
        raise ValueError(f"n_keys and hops must be >= 1, got {n_keys} and {hops}")
    rng = random.Random(zlib.crc32(repr(("real_task", task, length, round(depth, 6), int(seed), n_keys, hops)).encode()))
    sentences, question, answers, pieces_text = _needles(task, rng, n_keys, hops)
    needle_ids = [tokenizer.encode_body("\n" + s + "\n") for s in sentences]
    inner = [_token_range(tokenizer, ids, piece) for ids, piece in zip(needle_ids, pieces_text)]
    q_ids = tokenizer.encode_body("\n" + question)
    history = length - len(q_ids)  # tokens before the question
    filler_len = history - sum(len(n) for n in needle_ids)
    if filler_len < 8 * len(needle_ids):
        raise ValueError(f"a {task} document of {length} tokens cannot hold its {len(needle_ids)} needle(s) "
                         f"({history - filler_len} tokens) and the question ({len(q_ids)}); use a longer length (eval.tasks.multiples x mc.max_entries)")
    if filler_ids.numel() < filler_len:
        raise ValueError(f"the filler has {filler_ids.numel()} tokens, the document needs {filler_len}")
    # Cut points in the filler, one per needle: the first at `depth` of the history, the others seeded.
    first = round(depth * filler_len)
    if task == "vartrack":  # the chain follows its first statement, in order
        rest = sorted(rng.randint(first, filler_len) for _ in needle_ids[1:])
    else:
        rest = [rng.randint(0, filler_len) for _ in needle_ids[1:]]
    cuts = [first, *rest]
    order = sorted(range(len(cuts)), key=lambda i: (cuts[i], i))
    pieces, spans, pos, prev = [], [(0, 0)] * len(cuts), 0, 0
    for i in order:
        pieces.append(filler_ids[prev:cuts[i]])
        pos += cuts[i] - prev
        prev = cuts[i]
        pieces.append(torch.tensor(needle_ids[i], dtype=torch.long))
        spans[i] = (pos, pos + len(needle_ids[i]))
        pos += len(needle_ids[i])
    pieces += [filler_ids[prev:filler_len], torch.tensor(q_ids, dtype=torch.long)]
    ids = torch.cat([p.to(torch.long) for p in pieces])
    if ids.numel() != length:  # the arithmetic above is exact; this guards the invariant
        raise RuntimeError(f"built {ids.numel()} tokens for a {length}-token document")
    answer_spans = tuple((a + i, a + j) for (a, _), (i, j) in zip(spans, inner))
    return TaskDoc(task=task, ids=ids, answers=answers, needle_spans=tuple(spans), answer_spans=answer_spans,
                   question_start=history, depth=depth, seed=int(seed))


def _token_range(tokenizer, ids: list[int], text: str) -> tuple[int, int]:
    """The shortest ``[i, j)`` of ``ids`` whose decoding contains ``text`` (its first occurrence); tokenizers
    merge characters differently, so the range is found by decoding rather than by encoding ``text`` alone."""
    end = next((j for j in range(1, len(ids) + 1) if text in tokenizer.decode(ids[:j])), None)
    if end is None:
        raise RuntimeError(f"the needle {tokenizer.decode(ids)!r} does not spell its answer piece {text!r}")
    start = next(i for i in range(end - 1, -1, -1) if text in tokenizer.decode(ids[i:end]))
    return start, end


def filler_window(source, length: int, seed: int) -> Tensor:
    """``[length]`` tokens of held-out real text from ``source`` (a corpus source's ``sample_batch``), seeded."""
    return source.sample_batch(1, length, torch.Generator().manual_seed(int(seed)))[0]
