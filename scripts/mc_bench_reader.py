#!/usr/bin/env python
"""MegaContext decoding on a real model=hf reader against transformers' own generate (obsidian Inference).

    python scripts/mc_bench_reader.py [--run-dir runs/smollm2] [--reps 2] [--long-tokens 16384]
        [--json bench/results/X.json --md bench/results/X.md] [key=value ...]

Thin wrapper around :func:`mc.app.bench_reader.main` (see that module for what is measured and how).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mc.app.bench_reader import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
