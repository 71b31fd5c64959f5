#!/usr/bin/env python
"""Compile harness CLI: `python scripts/mc_compile_harness.py [--json PATH] [--strict] [flags] [key=value ...]`.

Thin wrapper over :func:`mc.harness.cli.main` (see ``--help`` and obsidian/Runbook.md). Exit 0 iff
every check passes, 1 when a check fails, 2 for a bad flag or config value.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from mc.harness.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
