#!/usr/bin/env python
"""Faults and bad inputs against the workflow, the API and the CLIs (issue #36's round, rerun).

    python scripts/mc_fault_fuzz.py [-k SUBSTRING] [--list] [--keep] [-v]

Trains a tiny run folder in a temporary directory (seconds), then runs every case of
mc/app/fault_cases.py and prints one line each; exit 0 iff every case ends with its documented
exit code and one `<prog>: error:` line (no traceback), or with the right output. Thin wrapper
around :func:`mc.app.fault_fuzz.main`; tests/test_fault_fuzz.py runs each case as a test.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mc.app.fault_cases import CASES  # noqa: E402
from mc.app.fault_fuzz import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(CASES))
