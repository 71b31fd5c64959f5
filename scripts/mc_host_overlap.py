#!/usr/bin/env python
"""Stage-2 host work on the critical path, inline vs prefetched:

    python scripts/mc_host_overlap.py [--out bench/results] [--micro-steps N] [--device-ms 30 15] [key=value ...]

Thin wrapper around :func:`mc.app.host_overlap.main` (see that module for what is measured and how).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mc.app.host_overlap import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
