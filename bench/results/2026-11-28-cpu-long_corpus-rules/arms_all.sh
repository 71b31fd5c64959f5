#!/bin/bash
# usage: abl2.sh RUN OUTNAME DRAW MULT DEPTHS NPC
RUN=$1; NAME=$2; DRAW=$3; MULT=$4; DEP=$5; NPC=$6; shift 6
I=allocator.inference
cd /tmp/lc && PYTHONPATH=/tmp/s8/code MC_PROGRESS=0 /usr/bin/time -f "%e s" /work/main/.venv/bin/python /tmp/s8/code/scripts/mc_ablate.py \
  --run-dir $RUN --quiet --draw-seed $DRAW --out /tmp/s8/abl/$NAME.json \
  --arm "one zoom:$I.branches=1,$I.branch_siblings=false,$I.branch_unchanged=false,$I.branch_lookahead=0" \
  --arm "no sibling branches:$I.branch_siblings=false" \
  --arm "no unchanged branch:$I.branch_unchanged=false" \
  --arm "no lookahead:$I.branch_lookahead=0" \
  --arm "no edge first:$I.edge_first=false" \
  --arm "no descend first:$I.descend_first=false,$I.branch_siblings=false" \
  "eval.long_range.multiples=$MULT" "eval.long_range.dense_multiples=[]" "eval.long_range.depths=$DEP" \
  eval.long_range.n_per_cell=$NPC "$@" > /tmp/s8/abl/$NAME.log 2>&1
