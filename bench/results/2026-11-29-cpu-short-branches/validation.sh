#!/bin/bash
# The validation runs behind obsidian Focus Allocator, "Short histories branch": on one trained long_corpus net and
# the validation draw 424242 (never reported as a result), mc_ablate.py --salience with one arm against all rules.
# Usage (from a copy of the repository): bash validation.sh NET_DIR WORK_DIR KIND OUT_JSON
#   KIND one_zoom_8x12x   one zoom (no other path, unchanged layout or lookahead), 8x and 12x, depths 0.1/0.5/0.9, 4 a cell
#   KIND one_zoom_ends    one zoom, 16x and 32x, exact depths 0.02 and 0.98, 8 a cell
#   KIND short_ends       allocator.inference.branch_max_tokens=1536, 16x and 32x, exact depths 0.02 and 0.98, 8 a cell
#   KIND short_mids       branch_max_tokens=1536, 16x and 32x, depths 0.1/0.5/0.9 (jitter 0.05), 4 a cell
# NET_DIR is a run folder (config.json, stage1/, stage2/); it is copied to WORK_DIR, so it is never touched.
set -euo pipefail
src=$1; work=$2; kind=$3; out=$4
rm -rf "$work"; mkdir -p "$work/stage1" "$work/stage2"
cp "$src/config.json" "$src/data.json" "$src/env.json" "$work/"
cp "$src/stage1/base.pt" "$src/stage1/summary.json" "$work/stage1/"; cp "$src/stage2/ckpt.pt" "$src/stage2/summary.json" "$work/stage2/"
one="one zoom:allocator.inference.branches=1,allocator.inference.branch_siblings=false,allocator.inference.branch_unchanged=false,allocator.inference.branch_lookahead=0"
short="short branches:allocator.inference.branch_max_tokens=1536"
case $kind in
  one_zoom_8x12x) arm=$one; grid=("eval.long_range.multiples=[8,12]" eval.long_range.n_per_cell=4) ;;
  one_zoom_ends) arm=$one; grid=("eval.long_range.multiples=[16,32]" "eval.long_range.depths=[0.02,0.98]" eval.long_range.depth_jitter=0 eval.long_range.n_per_cell=8) ;;
  short_ends) arm=$short; grid=("eval.long_range.multiples=[16,32]" "eval.long_range.depths=[0.02,0.98]" eval.long_range.depth_jitter=0 eval.long_range.n_per_cell=8) ;;
  short_mids) arm=$short; grid=("eval.long_range.multiples=[16,32]" "eval.long_range.depths=[0.1,0.5,0.9]" eval.long_range.depth_jitter=0.05 eval.long_range.n_per_cell=4) ;;
  *) echo "unknown KIND $kind" >&2; exit 2 ;;
esac
MC_PROGRESS=0 /usr/bin/time -f "%e s" ${PYTHON:-python} scripts/mc_ablate.py --run-dir "$work" --draw-seed 424242 --salience \
  --arm "$arm" --out "$out" --quiet "eval.long_range.dense_multiples=[]" "${grid[@]}"
