#!/usr/bin/env python
"""Benchmark eager vs torch.compile modes for LensNet calls, stage-2 micro-steps and tree appends.

    python scripts/mc_bench.py --json bench/b.json --md bench/b.md [--quick] [--modes eager default ...] [key=value ...]

Thin wrapper around :func:`mc.app.bench.main` (see that module for what is measured and how).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mc.app.bench import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
