#!/bin/bash
# The whole long_corpus training run with 2400 stage-2 steps (the preset's value since this record; it was passed
# as an override at 9e33c88, where the preset still said 3600), one seed, alone on the VM.
# Usage (from a copy of the repository): bash run.sh NAME SEED OUT_DIR
set -euo pipefail
/usr/bin/time -v env MC_PROGRESS=0 python -m mc.app.workflow --preset long_corpus --name "$1" train.seed="$2" \
  train.stage2.steps=2400 out_dir="$3" --stages env,data,stage1,stage2
