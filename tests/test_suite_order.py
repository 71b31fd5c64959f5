"""The suite's own scheduling (tests/conftest.py): the files it starts first exist, and collection puts them first,
each file's tests in their order and the other files in theirs."""
from __future__ import annotations

from pathlib import Path

from tests import conftest


class _Item:
    def __init__(self, file: str, name: str):
        self.path, self.name, self.keywords = Path("tests") / file, name, {}

    def add_marker(self, marker) -> None:
        self.keywords["skip"] = marker


def test_every_file_started_first_exists():
    here = Path(__file__).parent
    missing = [n for n in conftest.SLOW_FILES_FIRST if not (here / n).is_file()]
    assert not missing, f"tests/conftest.py SLOW_FILES_FIRST names files that are gone: {missing}; update the list"


def test_collection_puts_the_slow_files_first_and_keeps_every_other_order():
    first, second = conftest.SLOW_FILES_FIRST[:2]
    items = [_Item("test_a.py", "a1"), _Item(second, "s2a"), _Item("test_b.py", "b1"), _Item(first, "s1a"),
             _Item("test_a.py", "a2"), _Item(second, "s2b"), _Item(first, "s1b")]
    conftest.pytest_collection_modifyitems(None, items)
    assert [i.name for i in items] == ["s1a", "s1b", "s2a", "s2b", "a1", "b1", "a2"]
