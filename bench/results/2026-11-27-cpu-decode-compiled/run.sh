#!/bin/bash
# Alternating mc_generate.py runs, one process each, on a trained run folder: the decode loop with and without the
# KV cache, eager and with every inference call compiled. Usage (from the repository root):
#   bash bench/results/2026-11-27-cpu-decode-compiled/run.sh RUN_DIR OUT_DIR [ROUNDS] [NEW_TOKENS]
# then: python3 bench/results/2026-11-27-cpu-decode-compiled/summary.py OUT_DIR
set -euo pipefail
run=$1; out=$2; rounds=${3:-6}; new=${4:-1000}
here=$(dirname "$0"); py=${PYTHON:-.venv/bin/python}
mkdir -p "$out"
nets="compile.gistnet.inference=default compile.lensnet.inference=default"
for r in $(seq 1 "$rounds"); do
  for arm in cache nocache compiled_cache compiled_nocache; do
    case $arm in
      cache) extra=();;
      nocache) extra=(--no-kv-cache);;
      compiled_cache) extra=(compile.decode=default $nets);;
      compiled_nocache) extra=(--no-kv-cache $nets);;
    esac
    OMP_NUM_THREADS=1 "$py" scripts/mc_generate.py --run-dir "$run" --prompt-file "$here/prompt.txt" \
      --max-new-tokens "$new" --json "$out/$arm-$r.json" "${extra[@]}" > /dev/null 2>> "$out/stderr.log"
  done
done
