#!/usr/bin/env bash
# Stage 2 of long_corpus for 100 steps, one process (2 threads) vs --nproc 2 (Gloo, 1 thread a rank), alternating,
# on one run folder whose stage 1 is a 20-step base (timing only: what is learned is not read here).
set -euo pipefail
py=${MC_PYTHON:-.venv/bin/python}
args=(--preset long_corpus --name ranks_timing train.stage1.steps=20 train.stage2.steps=100 train.stage2.eval_every=100
      train.stage2.ckpt_every=100 )
$py -m mc.app.workflow "${args[@]}" --stages env,data,stage1 >/dev/null 2>&1
for round in 1 2; do
  for mode in one two; do
    rm -rf runs/ranks_timing/stage2
    extra=(); [ "$mode" = two ] && extra=(--nproc 2)
    t0=$(date +%s.%N)
    $py -m mc.app.workflow "${args[@]}" --stages stage2 "${extra[@]}" >/tmp/ranks_$mode.log 2>&1
    t1=$(date +%s.%N)
    echo "round $round $mode: stage2 wall $(echo "$t1 - $t0" | bc) s; $(grep -o 'stage2: done in [0-9.]* s' /tmp/ranks_$mode.log)"
  done
done
