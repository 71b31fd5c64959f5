#!/bin/bash
# The edit-budget runs behind obsidian Focus Allocator, "How large a budget" (2026-11-29): mc_ablate.py on one trained
# long_corpus net, exact depths 0.02/0.1/0.5/0.9/0.98, two sweep workers.
# Usage (from a copy of the repository): bash budget.sh NET_DIR WORK_DIR KIND OUT_JSON
#   KIND val_48x64x  validation draw 424242: edit budgets 12 and 14 against the net's own 10, 48x and 64x, 4 a cell
#   KIND val_other   validation draw 424242: budget 12 against 10 at 4x, 16x, 32x, 128x and 256x, 2 a cell
#   KIND fresh       a fresh draw: budget 10 against 12 (every arm at 12 unless it says 10), 4x, 32x, 48x, 64x, 3 a cell
# NET_DIR is a run folder (config.json, stage1/, stage2/); it is copied to WORK_DIR, so it is never touched.
set -euo pipefail
src=$1; work=$2; kind=$3; out=$4
rm -rf "$work"; mkdir -p "$work/stage1" "$work/stage2"
cp "$src/config.json" "$src/data.json" "$src/env.json" "$work/"
cp "$src/stage1/base.pt" "$src/stage1/summary.json" "$work/stage1/"; cp "$src/stage2/ckpt.pt" "$src/stage2/summary.json" "$work/stage2/"
grid=("eval.long_range.dense_multiples=[]" "eval.long_range.depths=[0.02,0.1,0.5,0.9,0.98]" eval.long_range.depth_jitter=0
      eval.long_range.workers=2)
case $kind in
  val_48x64x) args=(--draw-seed 424242 --arm "budget 12:allocator.inference.edit_budget=12"
                    --arm "budget 14:allocator.inference.edit_budget=14" "eval.long_range.multiples=[48,64]" eval.long_range.n_per_cell=4) ;;
  val_other) args=(--draw-seed 424242 --arm "budget 12:allocator.inference.edit_budget=12"
                   "eval.long_range.multiples=[4,16,32,128,256]" eval.long_range.n_per_cell=2) ;;
  fresh) args=(--arm "budget 10:allocator.inference.edit_budget=10" allocator.inference.edit_budget=12
               "eval.long_range.multiples=[4,32,48,64]" eval.long_range.n_per_cell=3) ;;
  *) echo "unknown KIND $kind" >&2; exit 2 ;;
esac
MC_PROGRESS=0 /usr/bin/time -f "%e s" ${PYTHON:-python} scripts/mc_ablate.py --run-dir "$work" --out "$out" --quiet "${args[@]}" "${grid[@]}"
