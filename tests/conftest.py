"""Shared pytest set-up: GPU tests are skipped (with the reason) where torch sees no CUDA device."""
import os

import pytest
import torch

# Compile tests spawn subprocesses; one thread each keeps a 2-core CI machine from thrashing.
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(max(1, int(os.environ["OMP_NUM_THREADS"])))


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False on this machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
