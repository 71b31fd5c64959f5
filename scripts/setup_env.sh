#!/usr/bin/env bash
# Shared set-up for scripts/test.sh and run10.sh: make sure a Python environment with the
# project installed exists, and print the python to use on stdout (everything else -> stderr).
#   - an active virtual environment ($VIRTUAL_ENV) is used as it is;
#   - otherwise .venv/ in the repo root is created on first use;
#   - MC_PYTHON=/path/to/python is used as it is and nothing is installed (machines without a
#     package index, e.g. the GPU machines of scripts/gpu_check.sh: the repo goes on PYTHONPATH).
# torch is pinned by constraints.txt (the CPU build on the project's machines); the install is
# skipped when the environment already satisfies the project (marker keyed on pyproject+constraints).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
extras="${MC_EXTRAS-dev,hf,gguf}"  # MC_EXTRAS="" installs the runtime only; hf: model=hf (transformers); gguf: .gguf / pypi: bases (model=smollm2)
if [ -n "${MC_PYTHON:-}" ]; then
  echo "[setup] MC_PYTHON=$MC_PYTHON: using it as it is (no install)" >&2
  echo "$MC_PYTHON"
  exit 0
fi
if [ -n "${VIRTUAL_ENV:-}" ]; then
  py="$VIRTUAL_ENV/bin/python"
else
  if [ ! -x "$root/.venv/bin/python" ]; then
    echo "[setup] creating $root/.venv" >&2
    python3 -m venv "$root/.venv" >&2
  fi
  py="$root/.venv/bin/python"
fi
stamp_src="$(cat "$root/pyproject.toml" "$root/constraints.txt"; echo "$extras")"
stamp="$(printf '%s' "$stamp_src" | sha256sum | cut -c1-16)"
marker="$("$py" -c 'import sys; print(sys.prefix)')/.mc_installed_$stamp"
if [ ! -f "$marker" ]; then
  target="$root${extras:+[$extras]}"
  echo "[setup] installing mc${extras:+[$extras]} with $root/constraints.txt (torch pinned)" >&2
  "$py" -m pip install -q --disable-pip-version-check -c "$root/constraints.txt" -e "$target" >&2
  touch "$marker"
fi
echo "$py"
