"""The docs vault holds together: every ``[[link]]`` in ``obsidian/`` names a note that exists, and every
dated ``bench/results/<date>-...`` path a note cites is in the repository.

Obsidian resolves a link by note name; a link wrapped across two lines (``[[Focus`` / ``Allocator]]``) renders
as plain text, so a reader following the vault hits a dead end where the author meant a pointer.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VAULT = ROOT / "obsidian"
LINK = re.compile(r"\[\[([^\]|#]+)(?:#[^\]|]*)?(?:\|[^\]]*)?\]\]")  # [[Note]], [[Note#Heading]], [[Note|alias]]
RECORD = re.compile(r"`(bench/results/\d{4}-\d{2}-\d{2}-[^`\s]+)`")  # a dated record cited by its repository path


def _notes() -> list[Path]:
    return sorted(VAULT.rglob("*.md"))


def test_the_vault_has_notes():
    names = {p.stem for p in _notes()}
    assert {"index", "Status", "Evaluation", "Design"} <= names, names


def test_every_vault_link_names_an_existing_note():
    names = {p.stem for p in _notes()}
    dead = [(p.relative_to(ROOT).as_posix(), m.group(1)) for p in _notes()
            for m in LINK.finditer(p.read_text(encoding="utf-8")) if m.group(1) not in names]
    assert not dead, f"links to no note (a wrapped link must be on one line): {dead}"


def test_every_cited_record_path_exists():
    missing = []
    for p in _notes():
        for m in RECORD.finditer(p.read_text(encoding="utf-8")):
            cited = m.group(1).rstrip("/.,;:)")
            if "<" in cited or "*" in cited or "{" in cited:  # a pattern ("<date>-..."), not a path
                continue
            if not (ROOT / cited).exists():
                missing.append((p.relative_to(ROOT).as_posix(), cited))
    assert not missing, f"records cited but not in bench/results: {missing}"
