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
exec "$py" -m pytest -q "$@"
