"""Fixtures of the GPU tests: string sets in the offsets + payload layout, built with NumPy.

Every test here is skipped when no CUDA device is present.  The ops are called through
``torch.ops.luminamoon.*`` on offsets/data tensors built directly (offsets = cumulative sums of
the byte lengths), so the tests depend on the extension, not on the Python StringTensor API.
"""
import os
import pathlib
import sys

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from gpu_data import all_datasets  # noqa: E402


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available() or os.environ.get("LM_GPU_TESTS_DEVICE", "cuda") != "cuda":
        return
    skip = pytest.mark.skip(reason="no CUDA device: the GPU tests run on a GPU machine (tests/gpu/run_gpu_checks.sh)")
    for item in items:
        if pathlib.Path(str(item.fspath)).resolve().parent == pathlib.Path(__file__).resolve().parent:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def datasets():
    return all_datasets()
