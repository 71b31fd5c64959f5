"""The sweep read by several forked CPU processes (``eval.long_range.workers``, mc.eval.sweep_workers): the same
rows in the same order as in one process, every failure of a worker raised, the progress bar counting them all."""
from __future__ import annotations

import os

import pytest
import torch

from mc.build import build_controller
from mc.config import ConfigError
from mc.config_checks import validate
from mc.eval.long_range import run_long_range
from mc.eval.sweep_workers import read_in_workers
from test_eval import tiny_cfg


def test_two_workers_read_the_sweep_exactly_as_one_process():
    cfg = tiny_cfg(n_docs=1)
    lr = cfg.eval.long_range
    lr.multiples, lr.depths, lr.n_per_cell, lr.n_needles = [2, 3], [0.1, 0.9], 3, 3
    ctrl = build_controller(validate(cfg), device="cpu")
    one = run_long_range(ctrl, cfg)
    threads = torch.get_num_threads()
    lr.workers = 2
    two = run_long_range(ctrl, validate(cfg))
    assert torch.get_num_threads() == threads  # the sweep gives the process its threads back
    assert len(one["rows"]) == 2 * 2 * 2 * 3 and two["rows"] == one["rows"]  # every field, in the sweep's order
    assert two["cells"] == one["cells"]


class _Bar:
    def __init__(self):
        self.n = 0

    def update(self, k):
        self.n += k


def test_rows_come_back_in_order_from_every_process_and_the_bar_counts_them_all():
    bar = _Bar()
    rows = read_in_workers(lambda x: {"x": x, "pid": os.getpid()}, list(range(7)), 3, bar)
    assert [r["x"] for r in rows] == list(range(7)) and bar.n == 7
    assert len({r["pid"] for r in rows}) == 3 and rows[0]["pid"] == os.getpid()  # item 0: this process
    assert [r["x"] for r in read_in_workers(lambda x: {"x": x}, [5], 4)] == [5]  # more workers than items


def test_a_worker_that_raises_fails_the_sweep_with_its_error():
    def read(x):
        if x == 3:  # item 3 is worker 1's (items go round-robin over 2 processes)
            raise ValueError("document 3 is bad")
        return {"x": x}

    with pytest.raises(RuntimeError, match=r"(?s)sweep worker 1 of 2 failed.*document 3 is bad"):
        read_in_workers(read, list(range(6)), 2)


def test_a_worker_that_dies_fails_the_sweep_naming_its_exit_code():
    def read(x):
        if x == 1 and os.getpid() != parent:
            os._exit(7)  # as a worker killed by the kernel would: no message, no rows
        return {"x": x}

    parent = os.getpid()
    with pytest.raises(RuntimeError, match="sweep worker 1 of 2 died \\(exit code 7\\).*workers=1"):
        read_in_workers(read, list(range(4)), 2)


@pytest.mark.parametrize("bad", [0, -2, 1.5])
def test_workers_must_be_a_positive_integer(bad):
    cfg = tiny_cfg(n_docs=1)
    cfg.eval.long_range.workers = bad
    with pytest.raises(ConfigError, match="eval.long_range.workers"):
        validate(cfg)


def test_a_compiled_net_keeps_the_sweep_in_one_process():
    """Dynamo guards on the thread count: a one-thread worker calling a net compiled (and frozen) at two threads
    would be a recompile. With LensNet compiled for inference the sweep says so and reads in one process, with the
    same rows and no recompile (a fresh interpreter: Dynamo's state is process-global)."""
    from _subproc import MARK, run_script  # noqa: PLC0415 - shared fresh-interpreter runner (tests/_subproc.py)

    res = run_script(f"""
        import contextlib, io, json, sys, torch
        sys.path.insert(0, "tests")
        torch.set_num_threads(2)  # the runner's environment gives one; the guard needs a change to trip
        from test_eval import tiny_cfg
        from mc.build import build_controller
        from mc.config_checks import validate
        from mc.eval.long_range import run_long_range
        cfg = tiny_cfg(n_docs=1)
        lr = cfg.eval.long_range
        lr.multiples, lr.depths, lr.n_per_cell, lr.n_needles = [2], [0.1, 0.9], 2, 3
        cfg.compile.lensnet.inference = "default"
        torch.manual_seed(0)
        ctrl = build_controller(validate(cfg), device="cpu")
        ctrl.warmup()
        one = run_long_range(ctrl, cfg)
        lr.workers = 2
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            two = run_long_range(ctrl, validate(cfg))
        print("{MARK}" + json.dumps({{"same": two["rows"] == one["rows"], "n": len(one["rows"]), "said": err.getvalue(),
                                      "threads": torch.get_num_threads()}}))
    """, timeout=600)
    assert res["same"] and res["n"] == 2 * 2 * 2 and res["threads"] == 2
    assert "workers=2: reading in this process only, a net is compiled for inference" in res["said"]
