"""Shared pytest set-up: GPU tests are skipped (with the reason) where torch sees no CUDA device; the slowest files
are collected first, so the parallel run starts them first."""
import os

import pytest
import torch

# Compile tests spawn subprocesses; one thread each keeps a 2-core CI machine from thrashing.
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(max(1, int(os.environ["OMP_NUM_THREADS"])))


# The files that take longest, longest first (`bash scripts/test.sh --durations=25`, 2026-12-06: the learning test,
# the GPU kit's two dry runs, the bench subprocess, the real-model decode, ~1-4 minutes each). scripts/test.sh hands
# files to its workers in collection order (--no-loadscope-reorder): started first, these run beside the many short
# files instead of after them, where the last one left ran alone on one core while the other waited.
SLOW_FILES_FIRST = ("test_gpu_check.py", "test_learning.py", "test_bench.py", "test_real_model.py",
                    "test_distributed.py", "test_recompile_guards.py", "test_hf_harness.py", "test_controller_compile.py",
                    "test_kv_cache.py", "test_nets_compile.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SLOW_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's tests keep their order
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False on this machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
