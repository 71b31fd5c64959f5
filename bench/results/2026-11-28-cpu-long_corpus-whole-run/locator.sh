#!/bin/bash
# The learned locator against the salience rule, each with the preset's branched search and with one zoom (no
# branches, sibling branches, unchanged candidate or lookahead: the locator alone), on one trained net and one fresh draw:
# mc_ablate.py --salience with a single arm, 16x and 32x, depths 0.1 / 0.5 / 0.9, 16 documents per cell.
# Usage (from a copy of the repository): bash locator.sh NET_DIR WORK_DIR DRAW OUT_JSON
# NET_DIR is a run folder (config.json, stage1/, stage2/); it is copied to WORK_DIR, so it is never touched.
set -euo pipefail
src=$1; work=$2; draw=$3; out=$4
rm -rf "$work"; mkdir -p "$work/stage1" "$work/stage2"
cp "$src/config.json" "$src/data.json" "$src/env.json" "$work/"
cp "$src/stage1/base.pt" "$src/stage1/summary.json" "$work/stage1/"; cp "$src/stage2/ckpt.pt" "$src/stage2/summary.json" "$work/stage2/"
MC_PROGRESS=0 /usr/bin/time -f "%e s" ${PYTHON:-python} scripts/mc_ablate.py --run-dir "$work" --draw-seed "$draw" --salience \
  --arm "one zoom:allocator.inference.branches=1,allocator.inference.branch_siblings=false,allocator.inference.branch_unchanged=false,allocator.inference.branch_lookahead=0" \
  --out "$out" --quiet "eval.long_range.multiples=[16,32]" "eval.long_range.dense_multiples=[]" eval.long_range.n_per_cell=16
