#!/usr/bin/env bash
# The MegaContext training workflow: environment set-up, then `python -m mc.app.workflow "$@"`
# (stages env, data, stage1, stage2, eval, report; see `bash run10.sh --help`).
#   - set-up: scripts/setup_env.sh (an active virtual environment is used as it is, otherwise
#     .venv/ is created); MC_EXTRAS picks the extras to install (default "plots,hf,gguf": matplotlib for
#     the report's plots, transformers for model=hf, gguf + accelerate for GGUF bases such as
#     model=smollm2 / --preset smollm2; if that install fails the run goes on without them);
#   - runs from the repository root, so outputs land in runs/<name>/;
#   - compile flags are honoured only after the compile harness passes on the same config.
#   - --nproc N runs stage 1 and stage 2 under `torchrun --standalone --nproc_per_node N` (DDP: NCCL
#     with one GPU per rank, Gloo on CPU; obsidian "Distributed training"); without it, one process.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$root"
if ! py="$(MC_EXTRAS="${MC_EXTRAS:-plots,hf,gguf}" bash "$root/scripts/setup_env.sh")"; then
  echo "[run10] set-up with extras '${MC_EXTRAS:-plots,hf,gguf}' failed; retrying with the base install (no plots)" >&2
  py="$(MC_EXTRAS= bash "$root/scripts/setup_env.sh")"
fi
# A run-local Inductor cache: the second compile of the same graphs takes seconds, not minutes.
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-$root/.cache/inductor}"
exec "$py" -m mc.app.workflow "$@"
