#!/usr/bin/env bash
# Run the test suite: set up the environment (see scripts/setup_env.sh), then pytest.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh tests/test_tree.py -k append`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="$(bash "$root/scripts/setup_env.sh")"
cd "$root"
# One thread per process: the CI machine has 2 cores and compile tests spawn subprocesses.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# A run-local Inductor cache keeps repeated compiles in the suite cheap.
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-$root/.cache/inductor}"
# Test files run in parallel, one worker per core (at most 4), a file's tests in one worker (module fixtures
# build once); MC_TEST_WORKERS=0 runs them in this process (e.g. under a debugger), -n N on the command line wins.
# (os.sched_getaffinity, not nproc: nproc follows OMP_NUM_THREADS, which is 1 here)
workers="${MC_TEST_WORKERS:-$("$py" -c 'import os; print(len(os.sched_getaffinity(0)))')}"
[ "$workers" -gt 4 ] && workers=4
par=()
if [ "$workers" -gt 1 ] && [[ " $* " != *" -n "* ]] && "$py" -c "import xdist" 2>/dev/null; then
  par=(-n "$workers" --dist loadfile)
  # files in collection order, the slowest first (tests/conftest.py), not by test count (xdist >= 3.7 has the flag)
  "$py" -c "import inspect, xdist.plugin as p; assert '--no-loadscope-reorder' in inspect.getsource(p)" 2>/dev/null \
    && par+=(--no-loadscope-reorder)
fi
exec "$py" -m pytest -q "${par[@]}" "$@"
