import os

import pytest


def pytest_collection_modifyitems(config, items):
    """`gpu` tests need an NVIDIA GPU (the CUDA driver); skip them cleanly without one."""
    from ctypes.util import find_library
    has_gpu = bool(find_library("cuda")) and os.path.exists("/dev/nvidia0")
    if has_gpu:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU and its driver")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
