#!/bin/bash
# locator.sh's two searches on the validation draw 424242 (the draw the refocus rules are chosen on; never reported
# as a result), 4x-256x, depths 0.1 / 0.5 / 0.9, 4 documents per cell: does one zoom cost LensNet anything there?
# Usage (from a copy of the repository): bash validation.sh NET_DIR WORK_DIR OUT_JSON
set -euo pipefail
src=$1; work=$2; out=$3
rm -rf "$work"; mkdir -p "$work/stage1" "$work/stage2"
cp "$src/config.json" "$src/data.json" "$src/env.json" "$work/"
cp "$src/stage1/base.pt" "$src/stage1/summary.json" "$work/stage1/"; cp "$src/stage2/ckpt.pt" "$src/stage2/summary.json" "$work/stage2/"
MC_PROGRESS=0 /usr/bin/time -f "%e s" ${PYTHON:-python} scripts/mc_ablate.py --run-dir "$work" --draw-seed 424242 --salience \
  --arm "one zoom:allocator.inference.branches=1,allocator.inference.branch_siblings=false,allocator.inference.branch_unchanged=false,allocator.inference.branch_lookahead=0" \
  --out "$out" --quiet "eval.long_range.multiples=[4,16,32,64,128,256]" "eval.long_range.dense_multiples=[]" eval.long_range.n_per_cell=4
