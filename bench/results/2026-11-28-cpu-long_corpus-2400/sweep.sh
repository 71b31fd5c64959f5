#!/bin/bash
# One sweep of a trained run folder at 16x-128x, 8 documents per (task, length, depth) cell, on draw DRAW, into
# /tmp/s9/ev/NAME/eval/eval.json (a copy of the run's weights and config, so the run itself is untouched).
# Usage: sweep.sh RUN NAME DRAW [overrides]. The 3600-step nets were swept with allocator.inference.edge_sides=3
# (their config.json records 2: they were trained before the preset's value changed; edge_sides is inference only).
set -e
RUN=$1; NAME=$2; DRAW=$3; shift 3
DST=/tmp/s9/ev/$NAME; rm -rf $DST; mkdir -p $DST/stage1 $DST/stage2
cp $RUN/config.json $RUN/data.json $RUN/env.json $DST/
cp $RUN/stage1/base.pt $RUN/stage1/summary.json $DST/stage1/; cp $RUN/stage2/*.pt $RUN/stage2/summary.json $DST/stage2/
cd /tmp/lc && PYTHONPATH=/tmp/s9/code MC_PROGRESS=0 /usr/bin/time -f "%e s" /work/main/.venv/bin/python /tmp/s9/code/scripts/mc_eval.py \
  --run-dir $DST --quiet "eval.long_range.multiples=[16,32,64,128]" "eval.long_range.dense_multiples=[]" \
  eval.long_range.n_per_cell=8 eval.draw_seed=$DRAW "$@" > $DST/eval.log 2>&1
