"""The fault fuzz (scripts/mc_fault_fuzz.py, cases in mc/app/fault_cases.py), one test per case: each bad
input or injected fault of issue #36 ends with its documented exit code and one `<prog>: error:` line
naming the cause (no traceback), or with the right output. One trained smoke-sized run folder is
shared by the cases (they copy it before damaging it); ~35 s in all on a 2-core machine.
"""
from __future__ import annotations

import pytest

from mc.app.fault_cases import CASES
from mc.app.fault_fuzz import Workspace, judge, main


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    return Workspace(tmp_path_factory.mktemp("fuzz"))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(ws, case):
    got = case.run(ws)
    if got.skip:
        pytest.skip(got.skip)
    why = judge(case, got)
    assert why is None, f"{case.name}: {why}\nstdout: {got.out[-1500:]}\nstderr: {got.err[-3000:]}"


def test_every_issue_item_has_cases_and_names_are_unique():
    assert {c.item for c in CASES} == {"1 lock", "2 NaN", "3 disk", "4 small", "holds"}
    assert len({c.name for c in CASES}) == len(CASES)
    assert all(c.prog in ("run10", "mc_generate", "mc_eval", "mc_compile_harness", "api") for c in CASES)


def test_the_judge_fails_what_the_issue_saw():
    """A traceback, a second error line, a wrong exit code or a missing needle each fail a case."""
    case = next(c for c in CASES if c.name == "run10/stages-empty")
    from mc.app.fault_fuzz import Outcome  # noqa: PLC0415

    assert judge(case, Outcome(2, err="run10: error: flag --stages='' names no stage; ...\n")) is None
    assert "exit 0" in judge(case, Outcome(0, out="[run10] plan: env=run, data=run, stage1=run"))
    assert "traceback" in judge(case, Outcome(2, err="Traceback (most recent call last):\nrun10: error: names no stage"))
    assert "2 'run10: error:' lines" in judge(case, Outcome(2, err="run10: error: names no stage\nrun10: error: x\n"))
    assert "not in stderr" in judge(case, Outcome(2, err="run10: error: something else\n"))


def test_the_script_lists_its_cases(capsys):
    assert main(CASES, ["--list"]) == 0
    out = capsys.readouterr().out
    assert all(c.name in out for c in CASES)
