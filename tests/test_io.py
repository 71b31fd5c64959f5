"""mc.io: atomic writes keep the old file on failure and leave no temporary; stale temporaries are cleaned;
OS errors (a full disk, a read-only or unwritable folder) become one WriteError naming the path and the cause."""
from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import mc.io as mc_io
from mc.io import (WriteError, append_text, atomic_write, clean_stale_tmp, describe_os_error, torch_save, write_bytes,
                   write_json, write_text)

ROOT = Path(__file__).resolve().parent.parent


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


# ----------------------------------------------------------------------------- OS errors: one WriteError, nothing left
def _enospc_after(limit: int):
    """An ``os.fdopen`` whose file takes ``limit`` bytes, then fails as a full disk does (ENOSPC)."""
    real = os.fdopen

    def fdopen(fd, *args, **kwargs):
        f = real(fd, *args, **kwargs)
        taken = [0]
        write = f.write

        def limited(data):
            if taken[0] + len(data) > limit:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            taken[0] += len(data)
            return write(data)

        f.write = limited
        return f

    return fdopen


def test_a_full_disk_inside_torch_save_is_one_write_error_and_keeps_the_old_file(tmp_path, monkeypatch):
    """torch.save answers the writer's ENOSPC with its own RuntimeError ("[enforce fail at inline_container.cc]");
    the error that reaches the user names the file and the real cause."""
    path = tmp_path / "ckpt.pt"
    torch_save(path, {"step": 1})
    monkeypatch.setattr(mc_io.os, "fdopen", _enospc_after(2000))
    with pytest.raises(WriteError) as info:
        torch_save(path, {"step": 2, "w": torch.ones(10_000)})
    assert str(info.value) == f"cannot write {path}: No space left on device (ENOSPC)"
    assert info.value.errno == errno.ENOSPC and isinstance(info.value, OSError)
    assert isinstance(info.value.__cause__, RuntimeError)  # what torch raised, kept as the cause
    monkeypatch.undo()
    assert _names(tmp_path) == ["ckpt.pt"] and torch.load(path)["step"] == 1


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EACCES, errno.EROFS])
def test_os_errors_at_each_step_of_a_write_name_the_path_and_the_cause(tmp_path, monkeypatch, code):
    """Creating the temporary (a read-only or immutable folder), or the fsync (a full disk noticed late)."""
    path = tmp_path / "sub" / "a.json"

    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    for where in ("mkstemp", "fsync"):
        with monkeypatch.context() as m:
            m.setattr(mc_io.tempfile if where == "mkstemp" else mc_io.os, where, fail)
            with pytest.raises(WriteError, match=rf"^cannot write {path}: {os.strerror(code)} \({errno.errorcode[code]}\)$"):
                write_json(path, {"x": 1})
        assert not path.exists() and not list(tmp_path.rglob("*.tmp"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a 0o500 folder anyway: the injected EACCES above covers it")
def test_an_unwritable_folder_is_a_write_error(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(WriteError, match="Permission denied"):
            write_text(folder / "x.txt", "x")
    finally:
        folder.chmod(0o700)


def test_a_failed_append_leaves_no_half_line(tmp_path, monkeypatch):
    path = tmp_path / "metrics.jsonl"
    append_text(path, '{"step": 1}\n')
    real_write = os.write

    def half_then_full(fd, data):  # the kernel takes part of the line, then the disk is full
        real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as m:
        m.setattr(mc_io.os, "write", half_then_full)
        with pytest.raises(WriteError, match="metrics.jsonl: No space left on device"):
            append_text(path, '{"step": 2, "loss": 1.5}\n')
    assert path.read_text() == '{"step": 1}\n'
    append_text(path, '{"step": 2}\n')
    assert path.read_text().splitlines() == ['{"step": 1}', '{"step": 2}']


def test_describe_os_error_is_one_line():
    assert describe_os_error(PermissionError(errno.EACCES, "Permission denied", "/r/x")) == \
        "/r/x: Permission denied (EACCES)"
    assert describe_os_error(FileNotFoundError("run stage 1 first")) == "run stage 1 first"


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1) to mount a private tmpfs")
def test_a_real_full_disk_tmpfs(tmp_path):
    """The issue's case on a real filesystem: a 1.2 MB tmpfs (in a private mount namespace, so nothing
    outside the test sees it) filled by a checkpoint write."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    body = ("import torch\nfrom mc.io import torch_save, WriteError\n"
            f"torch_save({str(mnt / 'small.pt')!r}, {{'w': torch.ones(10)}})\n"
            f"try:\n    torch_save({str(mnt / 'small.pt')!r}, {{'w': torch.ones(1_000_000)}})\n"
            "except WriteError as e:\n    print('ERR', e)\n")
    cmd = ["unshare", "-rm", "sh", "-c", f'mount -t tmpfs -o size=1200k tmpfs "$1" && exec "$2" -c "$3"; echo NOMOUNT',
           "sh", str(mnt), sys.executable, body]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if "NOMOUNT" in proc.stdout or proc.returncode != 0 and "mount" in proc.stderr:
        pytest.skip(f"this machine cannot mount a private tmpfs: {proc.stderr.strip()[:200]}")
    assert proc.returncode == 0, proc.stderr
    assert f"ERR cannot write {mnt / 'small.pt'}: No space left on device (ENOSPC)" in proc.stdout, proc.stdout
    assert "Traceback" not in proc.stderr
