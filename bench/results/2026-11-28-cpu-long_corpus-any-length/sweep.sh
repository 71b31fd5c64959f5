#!/bin/bash
# A record of how each sweep here ran (not a tool; paths are the session's): copies a trained run's nets into
# a fresh folder and runs scripts/mc_eval.py on it with the given overrides. Validation sweeps passed
# mc.max_entries=112 mc.bucket_ladder=[40,72,112] (the same reading as eval.long_range.budget=112 for this
# sweep), fresh-draw sweeps the preset's own eval.long_range.budget.
# usage: sweep.sh RUN NAME DRAW MULTIPLES NPC [extra overrides...]
set -e
RUN=$1; NAME=$2; DRAW=$3; MULT=$4; NPC=$5; shift 5
DST=/tmp/lc/ev/$NAME
rm -rf $DST; mkdir -p $DST
cp -r $RUN/config.json $RUN/data.json $RUN/env.json $DST/ 2>/dev/null || true
mkdir -p $DST/stage1 $DST/stage2
cp $RUN/stage1/base.pt $RUN/stage1/summary.json $DST/stage1/
cp $RUN/stage2/*.pt $RUN/stage2/summary.json $DST/stage2/ 2>/dev/null || true
ls $RUN/stage2 > $DST/stage2_files.txt
cd /tmp/lc && PYTHONPATH=/tmp/lc2 MC_PROGRESS=0 /usr/bin/time -f "%e s" /work/main/.venv/bin/python /tmp/lc2/scripts/mc_eval.py \
  --run-dir $DST --quiet "eval.long_range.multiples=$MULT" "eval.long_range.dense_multiples=[]" \
  eval.long_range.n_per_cell=$NPC eval.draw_seed=$DRAW "$@" > $DST/eval.log 2>&1
