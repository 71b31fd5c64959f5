"""Flush-to-zero for subnormal floats (mc/denormals.py): set by ``import mc`` for every thread of torch's pool.

Each check runs in a fresh interpreter: the float mode is per thread and per process, and the test process's own
pool was started long before these tests run.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mc.denormals import ENV, setting_from_env

# A parallel elementwise op over 2**20 values on 2 threads: each thread writes its share, and 1e-30 * 1e-10 is a
# subnormal float32 (1e-40 < 1.18e-38), so a thread without flush-to-zero leaves non-zero values in its half.
PROBE = """
import json, torch
import mc
torch.set_num_threads(2)
x = torch.full((1 << 20,), 1e-30) * 1e-10
print(json.dumps({"flush": mc.denormals.FLUSH_DENORMAL, "zeros": int((x == 0).sum()), "n": x.numel()}))
"""


def _probe(env_value: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if env_value is not None:
        env[ENV] = env_value
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_mc_flushes_subnormals_in_every_pool_thread():
    res = _probe(None)
    if not res["flush"]:
        pytest.skip("this CPU has no flush-to-zero mode torch can set (torch.set_flush_denormal returned False)")
    assert res["zeros"] == res["n"], f"{res['n'] - res['zeros']} subnormal results survived: a thread lacks the mode"


def test_opt_out_leaves_subnormals():
    res = _probe("0")
    assert res["flush"] is False
    assert res["zeros"] == 0, "MC_FLUSH_DENORMAL=0 must leave subnormal results as they are"


@pytest.mark.parametrize("value, expected", [("", True), ("1", True), (" 1 ", True), ("0", False)])
def test_setting_from_env(value, expected):
    assert setting_from_env({ENV: value}) is expected
    assert setting_from_env({}) is True


@pytest.mark.parametrize("value", ["yes", "2", "off"])
def test_bad_setting_names_the_variable(value):
    with pytest.raises(ValueError, match=f"{ENV}='{value}' is not valid"):
        setting_from_env({ENV: value})
