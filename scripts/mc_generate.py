#!/usr/bin/env python
"""Generate text from a trained run (see obsidian Inference).

    python scripts/mc_generate.py --run-dir runs/NAME (--prompt TEXT | --prompt-file F | < stdin)
        --max-new-tokens N [--temperature T --top-k K --seed S] [--show-wc] [--no-kv-cache] [--json OUT]

Thin wrapper around :func:`mc.app.generate.main` (loading, prompt checks, decoding, the JSON record).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mc.app.generate import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
