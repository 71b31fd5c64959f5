#!/usr/bin/env bash
# run10.sh with the standard MegaContext flags: LensNet (training and inference) and GistNet
# compiled (reduce-overhead by default; --compile_mode MODE changes it). The compile gate in the
# workflow runs the compile harness on this exact config before training. Extra arguments pass
# through (later flags win, e.g. `bash mc_run.sh --preset smoke --mc_compile_gistnet=0`; `--nproc N`
# trains on N GPUs under torchrun, see run10.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec bash "$root/run10.sh" --mc_compile_lensnet=1 --mc_compile_lensnet_inference=1 --mc_compile_gistnet=1 "$@"
