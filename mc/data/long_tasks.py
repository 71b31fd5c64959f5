"""Generated long-context tasks: passkey and multi-needle documents at a chosen length and depth.

Owns the documents of the long-range evaluation (obsidian Evaluation, "Long-range sweep"). No
download: by default the haystack is the recall task's lowercase filler (no uppercase, digits or '=' can
appear in it by accident), and the needles use the recall task's record format ``KEY=VALUE``, so
the copy skill the base learns in stage 1 is the one these tasks test. ``template``, ``haystack`` (filler cut
from a corpus) and ``near_decoys`` make harder documents (:mod:`mc.data.haystack`):

* ``passkey``: one needle with the fixed key ``PK…`` (``key_len`` letters) at relative ``depth``
  of the document; the document ends with the query ``\\nPK=`` and the value (the answer).
* ``multi_needle``: ``n_needles`` records with distinct random keys; the queried one sits at
  ``depth``, the others at random depths (distractors); the query names the queried key.

``depth`` is the needle's start as a fraction of the history before the query (0 = right after
BOS, 1 = right before the query). Documents come back as :class:`mc.data.recall.RecallDoc`, so
every span helper of the recall task applies. Same arguments -> identical document.
"""
from __future__ import annotations

import random
import zlib
from typing import Sequence

from mc.config import LONG_TASKS
from mc.data.haystack import (DEFAULT_TEMPLATE, check_template, draw_keys, query_prefix, realize_template, record_len,
                              record_text, separator_span)
from mc.data.recall import VALUE_ALPHABET, RecallDoc, assemble_ids, draw_unambiguous
from mc.data.tokenizer import ByteTokenizer

def make_long_doc(task: str, length: int, depth: float, seed: int, *, key_len: int, value_len: int,
                  n_needles: int = 4, tokenizer=None, template: str = DEFAULT_TEMPLATE, haystack=None,
                  near_decoys: bool = False, exclude: Sequence[str] = ()) -> RecallDoc:
    """One document of exactly ``length`` tokens (see the module docstring); ``tokenizer`` as in
    :func:`mc.data.recall.make_recall_doc` (bytes when None). ``template``, ``haystack`` (None = the word
    filler) and ``near_decoys`` (multi_needle: distractor keys one letter away from the queried key) are
    described in :mod:`mc.data.haystack`; a ``{s}`` in ``template`` is drawn per document, never giving one of
    ``exclude`` (the held-out template)."""
    tokenizer = tokenizer or ByteTokenizer()
    if task not in LONG_TASKS:
        raise ValueError(f"unknown long-range task {task!r}; expected one of {LONG_TASKS}")
    if not 0.0 <= depth <= 1.0:
        raise ValueError(f"depth must be in [0, 1] (a fraction of the history), got {depth}")
    check_template(template)
    n = 1 if task == "passkey" else n_needles
    if n < 1:
        raise ValueError(f"multi_needle needs n_needles >= 1, got {n_needles}")
    # crc32, not hash(): str hashing is salted per process, and documents must be the same everywhere
    key = (task, length, round(depth, 6), int(seed), key_len, value_len, n)
    if template != DEFAULT_TEMPLATE or near_decoys:  # the default documents keep the seed they always had
        key = key + (template, near_decoys)
    rng = random.Random(zlib.crc32(repr(key).encode()))
    written, template = template, realize_template(rng, template, exclude)  # no draw without {s}: documents unchanged
    rec_len = record_len(template, key_len, value_len)
    history = length - 1 - rec_len  # tokens before the query "\nPREFIXVALUE", BOS included
    if history < 1 + n * (rec_len + 2) + 8:
        raise ValueError(f"a {task} document of {length} tokens cannot hold {n} needle(s) of {rec_len + 2} tokens "
                         "and a query; use a longer length")
    return draw_unambiguous(lambda: _draw(task, length, depth, int(seed), rng, n, key_len, value_len, template, rec_len,
                                          history, tokenizer, haystack, near_decoys, written),
                            haystack, tokenizer, f"{task} document seed {seed}")


def _draw(task, length, depth, seed, rng, n, key_len, value_len, template, rec_len, history, tokenizer, haystack,
          near_decoys, written) -> RecallDoc:
    taken: set[str] = set()
    if task == "passkey":
        keys = [("P" + "K" * (key_len - 1))[:key_len]]
    elif near_decoys:
        keys = draw_keys(rng, 1, key_len, taken=taken)
        keys += draw_keys(rng, n - 1, key_len, near_of=keys[0], taken=taken)
    else:
        keys = draw_keys(rng, n, key_len, taken=taken)
    values = ["".join(rng.choice(VALUE_ALPHABET) for _ in range(value_len)) for _ in range(n)]
    # Needle starts: the queried one (index 0) at the requested depth, distractors anywhere, no overlap.
    slot = rec_len + 2  # "\n" + record + "\n"
    lo, hi = 1, history - slot
    want = lo + round(depth * (hi - lo))
    starts = [want]
    while len(starts) < n:
        cand = rng.randint(lo, hi)
        if all(abs(cand - s) >= slot for s in starts):
            starts.append(cand)
    order = sorted(range(n), key=lambda i: starts[i])
    pieces: list[int | str] = []
    pos = 1  # after BOS; filler counted in tokens, records one token per character
    spans: list[tuple[int, int]] = [(0, 0)] * n
    for i in order:
        gap = starts[i] - pos
        pieces += [gap, "\n"]
        pos += gap + 1
        pieces.append(record_text(template, keys[i], values[i]) + "\n")
        spans[i] = (pos, pos + rec_len)
        pos += rec_len + 1
    prefix = query_prefix(template, keys[0])
    pieces += [history - pos, f"\n{prefix}{values[0]}"]
    ids = assemble_ids(pieces, rng, tokenizer, length, haystack)
    query_start = length - value_len - len(prefix)
    return RecallDoc(ids=ids, keys=tuple(keys), values=tuple(values), record_spans=tuple(spans), answer_record=0,
                     query_start=query_start, answer_span=(length - value_len, length), seed=seed, template=template,
                     query_separator=separator_span(written, template, keys[0], query_start))
