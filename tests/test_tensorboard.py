"""train.tensorboard=true: the metrics' scalars also go to <run>/stage{1,2}/tb/, beside the JSONL.

The logging path is tested with a recording stand-in for ``SummaryWriter`` (the tensorboard package
is an optional extra, not installed in CI); one test writes real event files and reads them back
when the package is there. The missing-package error is tested by making the import fail.
"""
from __future__ import annotations

import shutil

import pytest

from _tiny_config import TINY
from mc.app import workflow
from mc.config import ConfigError
from mc.config_checks import validate
from mc.config_loading import load_config
from mc.train import tb_log
from mc.train.common import MetricsLog, read_metrics
from mc.train.stage1 import train_stage1
from mc.train.stage2 import train_stage2
from test_train import tiny_cfg


class FakeWriter:
    """Records what the training loops hand to SummaryWriter."""

    made: list["FakeWriter"] = []

    def __init__(self, log_dir, purge_step=None):
        self.log_dir, self.purge_step, self.scalars, self.closed = log_dir, purge_step, [], False
        FakeWriter.made.append(self)

    def add_scalar(self, tag, value, step):
        self.scalars.append((tag, value, step))

    def flush(self):
        pass

    def close(self):
        self.closed = True


def _missing():
    raise ModuleNotFoundError("No module named 'tensorboard'")


@pytest.fixture
def fake_writer(monkeypatch):
    FakeWriter.made = []
    monkeypatch.setattr(tb_log, "summary_writer_class", lambda: FakeWriter)
    return FakeWriter


def test_stage1_and_stage2_log_every_jsonl_scalar_to_tensorboard(tmp_path, fake_writer):
    cfg = tiny_cfg(s1_steps=2, s2_steps=2)
    cfg.train.tensorboard = True
    train_stage1(cfg, tmp_path, progress=False)
    train_stage2(cfg, tmp_path, progress=False)
    assert [w.log_dir for w in fake_writer.made] == [str(tmp_path / "stage1" / "tb"), str(tmp_path / "stage2" / "tb")]
    for w, stage in zip(fake_writer.made, ("stage1", "stage2")):
        assert w.closed and w.purge_step is None
        recs = read_metrics(tmp_path / stage / "metrics.jsonl")  # the JSONL stays the full record
        want = {(k, float(v), r["step"]) for r in recs for k, v in r.items()
                if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}
        assert set(w.scalars) == want and want
    tags = {t for t, _, _ in fake_writer.made[1].scalars}
    assert {"lm_loss", "pref_loss", "gap", "val_lm_loss"} <= tags


def test_off_by_default_and_resume_purges_the_cut_tail(tmp_path, fake_writer):
    MetricsLog(tmp_path / "a.jsonl", resume_step=None).write({"step": 1, "loss": 1.0})
    assert fake_writer.made == []  # train.tensorboard=false: no writer at all
    log = MetricsLog(tmp_path / "b.jsonl", resume_step=4, tensorboard_dir=tmp_path / "tb")
    log.write({"step": 5, "loss": 2.0, "ok": True, "name": "x", "bad": float("nan")})
    log.close()
    w = fake_writer.made[0]
    assert w.purge_step == 5 and w.scalars == [("loss", 2.0, 5)]  # bools, strings and NaN are not curves


def test_missing_package_is_a_one_line_startup_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tb_log, "summary_writer_class", _missing)
    for stage in workflow.STAGE_RUNNERS:
        monkeypatch.setitem(workflow.STAGE_RUNNERS, stage, lambda *a: pytest.fail("no stage may start"))
    rc = workflow.main([*TINY, f"out_dir={tmp_path}", "name=r", "train.tensorboard=true", "--stages=stage1"])
    err = capsys.readouterr().err.strip()
    assert rc == workflow.EXIT_CONFIG and "Traceback" not in err
    line = next(ln for ln in err.splitlines() if "tensorboard" in ln)
    assert "train.tensorboard=true" in line and "pip install '.[tb]'" in line
    assert not (tmp_path / "r").exists()  # stopped before anything was written
    with pytest.raises(ConfigError, match=r"pip install '\.\[tb\]'"):  # the library path says the same
        MetricsLog(tmp_path / "m.jsonl", resume_step=None, tensorboard_dir=tmp_path / "tb")
    tb_log.require_tensorboard(load_config([*TINY]))  # off: the package is not needed
    cfg = tiny_cfg()
    cfg.train.tensorboard = "yes"  # a RunConfig built in Python skips Hydra's type check: validate() has it
    with pytest.raises(ConfigError, match="train.tensorboard='yes' is invalid: expected true or false"):
        validate(cfg)


def test_real_event_files_hold_the_scalars(tmp_path):
    pytest.importorskip("torch.utils.tensorboard", reason="the tensorboard package (extra 'tb') is not installed")
    ea_mod = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator",
                                 reason="tensorboard's event reader is not installed")
    log = MetricsLog(tmp_path / "m.jsonl", resume_step=None, tensorboard_dir=tmp_path / "tb")
    for step in (1, 2):
        log.write({"step": step, "lm_loss": 3.0 / step})
    log.close()
    acc = ea_mod.EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("lm_loss")] == [(1, 3.0), (2, 1.5)]
    shutil.rmtree(tmp_path / "tb")
