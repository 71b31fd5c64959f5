#!/bin/bash
# The honest grid on a fresh draw, the preset as it was vs suffix_guard=3 + anchor_path=true, one after the other, each in
# a copy of the run folder (mc_eval writes eval/eval.json there). From the repository root: bash grid.sh RUN DRAW
set -euo pipefail
G='eval.long_range.multiples=[4,12,16,24,32,48,64] eval.long_range.depths=[0.02,0.1,0.5,0.9,0.98] eval.long_range.depth_jitter=0 eval.long_range.dense_multiples=[] eval.long_range.n_per_cell=8 eval.long_range.workers=2'
RUN=$1; DRAW=$2
for a in pre both; do
  d=runs/${RUN}_g${DRAW}_$a; rm -rf $d; mkdir -p $d; cp -r runs/$RUN/{config.json,data.json,env.json,stage1,stage2} $d/
  extra=""; [ $a = both ] && extra="allocator.inference.suffix_guard=3 allocator.inference.anchor_path=true"
  /usr/bin/time -f "%e s" env OMP_NUM_THREADS=2 .venv/bin/python scripts/mc_eval.py --run-dir $d --quiet eval.draw_seed=$DRAW $G $extra
done
