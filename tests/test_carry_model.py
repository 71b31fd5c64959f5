"""Carrying a GGUF base to a machine with no network in parts: split, join into the model cache, and refuse
missing or damaged parts without leaving a half-written model behind."""
from __future__ import annotations

import json
import os

import pytest

from mc.app.carry_model import join, main, pack


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MC_MODEL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def fake_gguf(path, n=100_003):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(n))
    return path


def test_pack_then_join_rebuilds_the_file_where_a_pypi_source_resolves(tmp_path, cache):
    member = fake_gguf(cache / "pypi" / "llm-x-1.0" / "pkg" / "m.gguf")  # as if fetched once here
    folders = pack("pypi:llm-x/1.0/pkg/m.gguf", tmp_path / "carry", 3)
    assert [f.name for f in folders] == ["model-1", "model-2", "model-3"]
    assert sum((f / f"part-{i + 1}").stat().st_size for i, f in enumerate(folders)) == member.stat().st_size
    manifest = json.loads((folders[2] / "model.json").read_text())
    assert manifest["cache_path"] == os.path.join("pypi", "llm-x-1.0", "pkg", "m.gguf") and len(manifest["parts"]) == 3
    original = member.read_bytes()
    member.unlink()  # the machine at the other end has no copy
    out = join(tmp_path / "carry")
    assert out == member and out.read_bytes() == original
    assert join(tmp_path / "carry") == out  # already there and intact: nothing to do


def test_a_local_gguf_and_the_command_line(tmp_path, cache):
    src = fake_gguf(tmp_path / "m.gguf", 5000)
    assert main(["pack", "--parts", "2", "--dest", str(tmp_path / "c"), "--hf-path", str(src)]) == 0
    target = tmp_path / "out" / "m.gguf"
    assert main(["join", "--dest", str(tmp_path / "c"), "--target", str(target)]) == 0
    assert target.read_bytes() == src.read_bytes()


def test_missing_and_damaged_parts_are_refused_and_nothing_is_left(tmp_path, cache):
    src = fake_gguf(tmp_path / "m.gguf")
    folders = pack(str(src), tmp_path / "carry", 2)
    target = tmp_path / "out" / "m.gguf"
    part2 = folders[1] / "part-2"
    data = part2.read_bytes()
    part2.unlink()
    with pytest.raises(SystemExit, match="part-2 is missing: carry .*model-2"):
        join(tmp_path / "carry", target)
    part2.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(SystemExit, match="damaged"):
        join(tmp_path / "carry", target)
    assert not target.exists() and not list(target.parent.glob(".*")) if target.parent.exists() else True
    with pytest.raises(SystemExit, match="pack the model here first"):
        join(tmp_path / "nothing", target)
    with pytest.raises(SystemExit, match="not a GGUF"):
        pack(str(tmp_path / "absent.gguf"), tmp_path / "c2", 2)
    with pytest.raises(SystemExit, match="--parts"):
        pack(str(src), tmp_path / "c3", 0)
