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


@pytest.fixture(scope="session", autouse=True)
def _kernel_cache_for_the_run(tmp_path_factory):
    """One kernel/model cache for the whole run (warm across tests), never the user's ~/.cache."""
    if "PLUS_EP_CACHE_DIR" not in os.environ:
        os.environ["PLUS_EP_CACHE_DIR"] = str(tmp_path_factory.mktemp("plus_ep_cache"))
    yield
