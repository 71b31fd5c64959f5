#!/usr/bin/env bash
# The GPU proof kit: every GPU check of the project in one command, inside a time budget, into
# bench/results/<date>-<gpu>.json and .md (see obsidian/Runbook.md "GPU proof").
#
#   bash scripts/gpu_check.sh                       # all parts, 25-minute budget (a GPU machine)
#   bash scripts/gpu_check.sh --part harness        # one part (each fits one 10-minute command)
#   bash scripts/gpu_check.sh --out "$OUT" ...      # results elsewhere (8 files at most)
#   bash scripts/gpu_check.sh --dry-run             # the same parts on tiny shapes on the CPU, into a temp folder
#   bash scripts/gpu_check.sh --report-only --out DIR   # rebuild DIR's report from DIR/parts/*.json
#
# Parts: tests, sync, harness, bench, workflow, overlap (python -m mc.app.gpu_check --help).
# Python: $MC_PYTHON if set; on a dry run the project's environment (scripts/setup_env.sh);
# otherwise `python3` (the GPU image's, which holds torch). Hydra: when that python lacks it, the
# wheels in .whl/ (made by scripts/fetch_gpu_wheels.sh on a machine with a package index) are
# installed into a --target folder with no index (the GPU machines have no network).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
dry=0
report_only=0
for a in "$@"; do
  if [ "$a" = "--dry-run" ]; then dry=1; fi
  if [ "$a" = "--report-only" ]; then report_only=1; fi  # reads JSON only: no torch, no Hydra needed
done
if [ -n "${MC_PYTHON:-}" ]; then
  py="$MC_PYTHON"
elif [ "$dry" = 1 ]; then
  py="$(bash "$root/scripts/setup_env.sh")"
else
  py="python3"
fi
if [ "$report_only" = 0 ] && ! "$py" -c "import hydra, omegaconf" >/dev/null 2>&1; then
  if ! compgen -G "$root/.whl/*.whl" >/dev/null; then
    echo "gpu_check: error: $py has no hydra-core and there is no .whl/ folder: run 'bash scripts/fetch_gpu_wheels.sh'" \
         "on a machine with package-index access, then carry .whl to this machine" >&2
    exit 2
  fi
  site="${MC_WHEEL_SITE:-/tmp/mc-gpu-site}"
  echo "[gpu-check] installing the carried wheels ($(cd "$root/.whl" && echo *.whl)) into $site" >&2
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$root"/.whl/*.whl
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
export MC_PYTHON="$py"  # run10.sh / mc_run.sh use it as it is: nothing is pip-installed here
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-$root/.cache/inductor}"
if [ "$dry" = 1 ]; then export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"; fi  # a small shared CPU machine
exec "$py" -m mc.app.gpu_check "$@"
