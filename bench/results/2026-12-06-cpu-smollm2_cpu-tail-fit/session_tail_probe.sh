#!/bin/bash
# The session probe of this record: the refocus-check record's check_probe.py with the refocus check fixed at the
# preset's 16 and branch_tail_tokens in place of its K (written next to this script, then run).
#   bash session_tail_probe.sh RUN_DIR DRAW N_DOCS TAIL [TAIL ...]     e.g. bash session_tail_probe.sh runs/rf_s2 20261206 8 8 24
set -e
HERE=$(cd "$(dirname "$0")" && pwd)
sed -e 's/"eval.session_tail=128"\]/"eval.session_tail=128", "allocator.inference.refocus_check=16"]/' \
    -e 's/allocator.inference.refocus_check={k}/allocator.inference.branch_tail_tokens={k}/' \
    -e 's/ctrl.cfg.allocator.inference.refocus_check = k/ctrl.cfg.allocator.inference.branch_tail_tokens = k/' \
    -e 's/{src} check {k}/{src} tail {k}/' \
    -e 's/f"probe-{run_dir.name}/f"session-probe-{run_dir.name}/' \
    "$HERE/../2026-12-06-cpu-smollm2_cpu-refocus-check/check_probe.py" > "$HERE/session_tail_probe.py"
python "$HERE/session_tail_probe.py" "$@"
