#!/usr/bin/env bash
# Download, on a machine WITH package-index access, the Python wheels the GPU machines lack, into
# the git-ignored folder .whl/ (carried to the GPU machine beside the checkout; scripts/gpu_check.sh
# installs them there with `pip install --no-index --target`). See obsidian/Runbook.md "GPU proof".
#
#   bash scripts/fetch_gpu_wheels.sh            # fetch into .whl/, then verify
#   bash scripts/fetch_gpu_wheels.sh --verify   # only verify an existing .whl/
#
# The GPU image (python 3.12, torch 2.11, no network) has torch, tqdm, PyYAML, packaging, pytest,
# hypothesis, matplotlib, transformers and accelerate, but not Hydra and not gguf (which transformers needs to
# read a GGUF base such as model=smollm2): hydra-core, omegaconf, antlr4-python3-runtime and gguf are
# fetched, pinned. All four are pure Python (py3-none-any): antlr4-python3-runtime 4.9.x (the
# version omegaconf 2.3 and hydra 1.3 require) exists on the index as a source release only, so
# it is built into a wheel here. Verification installs the folder into an empty --target with no
# index and resolves the h100 preset through Hydra from it, with a python that has no Hydra.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/.whl"
HYDRA_CORE=1.3.8
OMEGACONF=2.3.1
ANTLR4=4.9.3
GGUF=0.19.0
# The verification imports the project (torch): the project's environment when there is one (scripts/setup_env.sh).
if [ -n "${PYTHON:-}" ]; then py="$PYTHON"
elif [ -x "$root/.venv/bin/python" ]; then py="$root/.venv/bin/python"
else py=python3
fi

fetch() {
  rm -rf "$dest"
  mkdir -p "$dest"
  echo "[wheels] downloading hydra-core==$HYDRA_CORE omegaconf==$OMEGACONF gguf==$GGUF (py3-none-any, for python 3.12)"
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform any \
    -d "$dest" "hydra-core==$HYDRA_CORE" "omegaconf==$OMEGACONF" "gguf==$GGUF"
  echo "[wheels] building antlr4-python3-runtime==$ANTLR4 (source-only on the index) into a wheel"
  "$py" -m pip wheel -q --no-deps -w "$dest" "antlr4-python3-runtime==$ANTLR4"
  (cd "$dest" && sha256sum ./*.whl > SHA256SUMS)
}

verify() {
  local n tmp
  n=$(find "$dest" -maxdepth 1 -type f -name '*.whl' | wc -l)
  if [ "$n" -ne 4 ]; then
    echo "[wheels] error: expected 4 wheels in $dest, found $n; run: bash scripts/fetch_gpu_wheels.sh" >&2
    exit 1
  fi
  for w in "$dest"/*.whl; do
    case "$(basename "$w")" in
      *-py3-none-any.whl|*-py2.py3-none-any.whl) ;;
      *) echo "[wheels] error: $(basename "$w") is not a pure-Python wheel (the GPU machine runs python 3.12)" >&2; exit 1 ;;
    esac
  done
  (cd "$dest" && sha256sum --quiet -c SHA256SUMS)
  if ! "$py" -c "import torch" >/dev/null 2>&1; then
    echo "[wheels] error: $py has no torch, which the verification needs (it resolves a preset through the project);" \
         "run 'bash scripts/setup_env.sh' first, or set PYTHON to a python with torch" >&2
    exit 1
  fi
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' RETURN
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$tmp/site" "$dest"/*.whl
  # -s: no user site; the target goes first, so these imports come from the wheels, not this machine
  PYTHONPATH="$tmp/site:$root" "$py" -s - "$tmp/site" <<'EOF'
import sys
site = sys.argv[1]
import antlr4, gguf, hydra, omegaconf
for mod in (antlr4, gguf, hydra, omegaconf):
    assert mod.__file__.startswith(site), f"{mod.__name__} was imported from {mod.__file__}, not from the wheels"
from mc.config_loading import load_config
cfg = load_config(["preset=h100", "train.device=cpu"])
print(f"[wheels] ok: hydra {hydra.__version__}, omegaconf {omegaconf.__version__} from the wheels resolve "
      f"preset={cfg.preset} (d_model={cfg.model.d_model}, history {cfg.mc.history_tokens} tokens)")
EOF
  du -sh "$dest" | awk '{print "[wheels] " $2 ": " $1 " (travels with the checkout: name .whl in the run tool'"'"'s carry)"}'
}

case "${1:-}" in
  --verify) verify ;;
  ""|--fetch) fetch; verify ;;
  -h|--help) sed -n '2,14p' "$0" ;;
  *) echo "fetch_gpu_wheels.sh: unknown argument $1 (use --verify or nothing)" >&2; exit 2 ;;
esac
