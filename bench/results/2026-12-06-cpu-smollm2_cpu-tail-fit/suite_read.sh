#!/bin/bash
# One task-suite read of a trained smollm2_cpu run at a given branch_tail_tokens, on the validation draw 20261129,
# `focused` and `salience` only, into this folder.
#   bash suite_read.sh NAME RUN_DIR TAIL TASK N_PER_CELL      e.g. bash suite_read.sh s0 runs/rf_s0 24 passkey 12
set -e
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../../.."
D=$(mktemp -d)/run
cp -r "$2" "$D"; rm -rf "$D"/eval/tasks.*
s=$(date +%s)
OMP_NUM_THREADS=1 python scripts/mc_eval.py --run-dir "$D" --quiet --tasks "$4" eval.tasks.budget=128 \
    eval.tasks.n_per_cell="$5" eval.draw_seed=20261129 'eval.tasks.variants=[focused,salience]' \
    allocator.inference.branch_tail_tokens="$3"
echo "$4-$1-t$3 $(( $(date +%s) - s )) s" >> "$HERE/times.txt"
cp "$D/eval/tasks.json" "$HERE/$4-$1-t$3.json"; cp "$D/eval/tasks.md" "$HERE/$4-$1-t$3.md"
