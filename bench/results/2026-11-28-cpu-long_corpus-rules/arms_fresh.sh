#!/bin/bash
RUN=$1; NAME=$2; MULT=$3; DEP=$4; NPC=$5; shift 5
I=allocator.inference
cd /tmp/lc && PYTHONPATH=/tmp/s8/code MC_PROGRESS=0 /usr/bin/time -f "%e s" /work/main/.venv/bin/python /tmp/s8/code/scripts/mc_ablate.py \
  --run-dir $RUN --quiet --out /tmp/s8/abl/$NAME.json \
  --arm "edge sides 3:$I.edge_sides=3" \
  --arm "no sibling branches:$I.branch_siblings=false" \
  --arm "edge sides 3, no siblings:$I.edge_sides=3,$I.branch_siblings=false" \
  "eval.long_range.multiples=$MULT" "eval.long_range.dense_multiples=[]" "eval.long_range.depths=$DEP" \
  eval.long_range.n_per_cell=$NPC "$@" > /tmp/s8/abl/$NAME.log 2>&1
