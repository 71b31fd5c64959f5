#!/usr/bin/env python
"""Stage-2 micro-step cost against the base model's forward + backward alone, and a profile by phase.

    python scripts/mc_step_profile.py [--presets cpu long] [--reps 10] [--json X.json --md X.md] [key=value ...]

Thin wrapper around :func:`mc.app.step_profile.main` (see that module for what is measured and how).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mc.app.step_profile import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
