"""mc.io: atomic writes keep the old file on failure and leave no temporary; stale temporaries are cleaned."""
from __future__ import annotations

import json
import os

import pytest
import torch

from mc.io import atomic_write, clean_stale_tmp, torch_save, write_bytes, write_json, write_text


def _names(folder) -> list[str]:
    return sorted(os.listdir(folder))


def test_writes_land_whole_and_leave_no_temporary(tmp_path):
    write_text(tmp_path / "a.md", "héllo\n")
    write_json(tmp_path / "sub" / "b.json", {"x": 1, "p": tmp_path})  # parent created; Path via str
    write_bytes(tmp_path / "c.bin", b"\x00\x01")
    torch_save(tmp_path / "d.pt", {"w": torch.arange(3)})
    assert (tmp_path / "a.md").read_text(encoding="utf-8") == "héllo\n"
    assert json.loads((tmp_path / "sub" / "b.json").read_text()) == {"x": 1, "p": str(tmp_path)}
    assert (tmp_path / "c.bin").read_bytes() == b"\x00\x01"
    assert torch.equal(torch.load(tmp_path / "d.pt")["w"], torch.arange(3))
    assert _names(tmp_path) == ["a.md", "c.bin", "d.pt", "sub"] and _names(tmp_path / "sub") == ["b.json"]


def test_a_writer_failing_mid_way_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "state.json"
    write_json(path, {"step": 1})

    def half_then_fail(f):
        f.write(b'{"step": 2, "trunc')  # bytes already in the temporary when the serializer dies
        raise RuntimeError("serializer failed")

    with pytest.raises(RuntimeError, match="serializer failed"):
        atomic_write(path, half_then_fail)
    assert _names(tmp_path) == ["state.json"], "a failed write left a temporary file"
    assert json.loads(path.read_text()) == {"step": 1}, "a failed write damaged the previous file"


def test_torch_save_of_an_unpicklable_object_keeps_the_old_file(tmp_path):
    path = tmp_path / "ckpt.pt"
    torch_save(path, {"step": 1})
    with pytest.raises(Exception):  # noqa: B017 - pickle's error type differs across Python versions
        torch_save(path, {"step": 2, "w": torch.ones(100), "bad": lambda: None})  # fails after writing some bytes
    assert _names(tmp_path) == ["ckpt.pt"]
    assert torch.load(path)["step"] == 1


def test_clean_stale_tmp_removes_only_temporaries(tmp_path):
    (tmp_path / "keep.json").write_text("{}")
    (tmp_path / ".ckpt.pt.x1y2.tmp").write_bytes(b"half")  # the name atomic_write gives its temporaries
    (tmp_path / "report.md.tmp").write_text("half")  # older writers' style
    sub = tmp_path / "stage1"
    sub.mkdir()
    (sub / ".base.pt.abc.tmp").write_bytes(b"half")
    (sub / "base.pt").write_bytes(b"w")
    removed = clean_stale_tmp(tmp_path)
    assert {p.name for p in removed} == {".ckpt.pt.x1y2.tmp", "report.md.tmp"}
    assert _names(tmp_path) == ["keep.json", "stage1"]
    assert _names(sub) == [".base.pt.abc.tmp", "base.pt"], "not recursive unless asked"
    assert [p.name for p in clean_stale_tmp(tmp_path, recursive=True)] == [".base.pt.abc.tmp"]
    assert _names(sub) == ["base.pt"]
    assert clean_stale_tmp(tmp_path / "missing") == []
