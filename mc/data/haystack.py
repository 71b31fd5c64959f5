"""What surrounds the needles of generated documents: the filler (haystack), record templates and keys.

Owns the three knobs that decide whether finding a record needs a *learned* locator (obsidian Data,
"Haystacks, templates and decoys"):

* **Haystack.** ``words`` is the original lowercase pseudo-text: no uppercase letter, digit, ``=`` or
  ``:`` can appear in it, so the record is the only "unusual" text and a trivial rule finds it.
  ``corpus`` cuts the filler from the run's own corpus (Python source by default: capitals, digits,
  ``=`` and ``:`` on every line); training documents read the train split, evaluation documents the
  validation split (:class:`CorpusHaystack`; :func:`mc.data.loader.corpus_haystack` builds one).
* **Templates.** A record is a template such as ``{k}={v}`` or ``set {k} to {v}`` with the key and the
  value filled in; the query repeats the template's text up to the value (``\\nKEY=``), so answering is
  a copy whatever the template. Training documents draw a template per document; one template can be
  held out for evaluation only (``data.recall.eval_template``). A template may hold ``{s}``, a separator
  drawn afresh for each document (:func:`draw_separator`: one or two symbols, or a made-up lowercase word), so
  the base cannot tie its copy to a few fixed separators; a realisation equal to the held-out template is
  never drawn.
* **Keys.** ``near_decoys`` makes every other record's key differ from the queried key in one letter,
  so lexical overlap with the question no longer singles the record out.

Every draw comes from the caller's ``random.Random``, so a document is fixed by its seed.
"""
from __future__ import annotations

import random
import string
from typing import Sequence

import torch
from torch import Tensor

from mc.config import HAYSTACKS

KEY_ALPHABET = string.ascii_uppercase
DEFAULT_TEMPLATE = "{k}={v}"
SEPARATOR = "{s}"  # in a template: a separator drawn per document (draw_separator)
SEPARATOR_SYMBOLS = "=:-><|;/_@#~+*%&!^"
SEPARATOR_MAX_LEN = 6  # " " + a 4-letter word + " ", the longest draw_separator returns


def check_template(template: str) -> None:
    """ValueError unless ``template`` holds ``{k}`` once, then ``{v}`` once at its very end, with some text
    between them and no newline or other braces (a record is one line; its value is its last tokens)."""
    if not isinstance(template, str):
        raise ValueError(f"record template {template!r} is invalid: expected a string such as '{DEFAULT_TEMPLATE}'")
    rest = template.replace("{k}", "").replace("{v}", "").replace(SEPARATOR, "")
    sep_ok = template.count(SEPARATOR) == 0 or (
        template.count(SEPARATOR) == 1 and template.find("{k}") < template.index(SEPARATOR) < template.find("{v}"))
    if (template.count("{k}") != 1 or template.count("{v}") != 1 or not template.endswith("{v}")
            or template.index("{k}") + 3 >= template.index("{v}") or "{" in rest or "}" in rest or "\n" in template
            or not sep_ok):
        raise ValueError(f"record template {template!r} is invalid: it needs '{{k}}' once, then '{{v}}' once at its "
                         f"end, some text between them, at most one '{SEPARATOR}' (a drawn separator) between them, "
                         f"no newline and no other braces (e.g. '{DEFAULT_TEMPLATE}', 'set {{k}} to {{v}}', '{{k}}{SEPARATOR}{{v}}')")


def record_text(template: str, key: str, value: str) -> str:
    """The record as it appears in a document, e.g. ``AB=123``."""
    return template.replace("{k}", key).replace("{v}", value)


def query_prefix(template: str, key: str) -> str:
    """The template's text up to the value with the key filled in (``AB=``): what the query repeats."""
    return template[:-3].replace("{k}", key)


def record_len(template: str, key_len: int, value_len: int) -> int:
    """Tokens of a record (one per character): the template's own text plus the key and the value; with a
    ``{s}`` not yet drawn, the longest its separator can be (so a length check holds for every draw)."""
    return len(template.replace(SEPARATOR, "x" * SEPARATOR_MAX_LEN)) - 6 + key_len + value_len


def draw_separator(rng: random.Random) -> str:
    """A record separator: half the time one or two of :data:`SEPARATOR_SYMBOLS` with an optional space before
    (30%) and after (50%) (``=``, ``: ``, `` -> ``), else a space, a made-up word of 2-4 lowercase letters and a
    space (`` qo ``, `` vekt ``). Made-up words, not English ones: a held-out `` is `` stays unseen."""
    if rng.random() < 0.5:
        core = "".join(rng.choice(SEPARATOR_SYMBOLS) for _ in range(rng.randint(1, 2)))
        return (" " if rng.random() < 0.3 else "") + core + (" " if rng.random() < 0.5 else "")
    return " " + "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 4))) + " "


def realize_template(rng: random.Random, template: str, exclude: Sequence[str] = ()) -> str:
    """``template`` with its ``{s}`` replaced by a :func:`draw_separator` draw, redrawn while the result is one of
    ``exclude`` (the held-out template); unchanged, with no draw from ``rng``, when it has no ``{s}``."""
    if SEPARATOR not in template:
        return template
    while True:
        out = template.replace(SEPARATOR, draw_separator(rng))
        if out not in exclude:
            return out


def choose_template(rng: random.Random, templates: Sequence[str]) -> str:
    """One of ``templates`` as written (a ``{s}`` not yet drawn); no draw from ``rng`` when there is only one
    (documents of a one-template config stay what they were before templates existed)."""
    return templates[0] if len(templates) == 1 else rng.choice(list(templates))


def separator_span(template: str, realized: str, key: str, query_start: int) -> tuple[int, int] | None:
    """Token span of the drawn separator inside a document's query (one token per character), for the query of
    ``key`` starting at ``query_start`` under ``template`` as written and its realisation ``realized``; None when
    ``template`` has no ``{s}``."""
    if SEPARATOR not in template:
        return None
    lo = query_start + len(template[:template.index(SEPARATOR)].replace("{k}", key))
    return lo, lo + len(realized) - len(template) + len(SEPARATOR)


def draw_keys(rng: random.Random, n: int, key_len: int, *, near_of: str | None = None,
              taken: set[str] | None = None) -> list[str]:
    """``n`` distinct keys of ``key_len`` uppercase letters not in ``taken`` (which gains them). With
    ``near_of``, each differs from it in exactly one position (a near-miss decoy); at most
    ``key_len * 25`` such keys exist."""
    taken = set() if taken is None else taken
    if near_of is not None and n > key_len * (len(KEY_ALPHABET) - 1):
        raise ValueError(f"{n} near-miss keys of length {key_len} do not exist; lower the record count or raise key_len")
    keys: list[str] = []
    while len(keys) < n:
        if near_of is None:
            k = "".join(rng.choice(KEY_ALPHABET) for _ in range(key_len))
        else:
            i = rng.randrange(key_len)
            k = near_of[:i] + rng.choice(KEY_ALPHABET.replace(near_of[i], "")) + near_of[i + 1:]
        if k not in taken:
            taken.add(k)
            keys.append(k)
    return keys


class CorpusHaystack:
    """Filler cut from one split of a corpus: ``n`` consecutive tokens of its cyclic token stream at an
    offset drawn from the document's own rng. BOS/EOS between corpus documents become newlines, so a
    filler never holds a token the model reads as a document boundary."""

    def __init__(self, stream, tokenizer):
        self.stream = stream  # mc.data.loader.TokenStream over the split's documents
        nl = tokenizer.char_ids("\n")
        self.newline = nl[0] if len(nl) == 1 else tokenizer.eos_id
        self.boundaries = torch.tensor([tokenizer.bos_id, tokenizer.eos_id], dtype=torch.long)

    def ids(self, rng: random.Random, n: int, tokenizer) -> list[int]:
        if n == 0:
            return []
        window = self.stream.window(rng.randrange(self.stream.total), n)  # [n]
        window = torch.where(torch.isin(window, self.boundaries), torch.full_like(window, self.newline), window)
        return window.tolist()


def occurrences(ids: Tensor, pattern: Sequence[int], end: int) -> list[int]:
    """Start indices of ``pattern`` inside ``ids[:end]``."""
    m = len(pattern)
    if m == 0 or end < m:
        return []
    win = ids[:end].unfold(0, m, 1)  # [end - m + 1, m]
    hit = (win == torch.tensor(list(pattern), dtype=ids.dtype)).all(dim=1)
    return hit.nonzero().flatten().tolist()
