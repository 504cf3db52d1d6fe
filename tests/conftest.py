import os

import pytest


GROUPS = ("cpu", "native", "emulated", "gpu", "zoo")


def pytest_collection_modifyitems(config, items):
    """Mark each test with its folder (tests/<group>/, see pyproject's markers), so `-m cpu` or
    `-m "not zoo"` select by need; `gpu` tests need an NVIDIA GPU (the CUDA driver) and skip
    themselves cleanly without one."""
    from ctypes.util import find_library
    from pathlib import Path
    here = Path(__file__).resolve().parent
    for item in items:
        rel = Path(str(item.fspath)).resolve().relative_to(here)
        if rel.parts and rel.parts[0] in GROUPS:
            item.add_marker(getattr(pytest.mark, rel.parts[0]))
    from plus_ep import config
    if not config.flag("PLUS_EP_SLOW_TESTS"):
        slow = pytest.mark.skip(reason="slow acceptance test: set PLUS_EP_SLOW_TESTS=1 to run it")
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(slow)
    has_gpu = bool(find_library("cuda")) and os.path.exists("/dev/nvidia0")
    if has_gpu:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU and its driver")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _kernel_cache_for_the_run(tmp_path_factory):
    """One kernel/model cache for the whole run (warm across tests), never the user's ~/.cache. Zoo
    exports stay where they were (<cache root>/zoo before the move): they take minutes to make."""
    from plus_ep import config
    if "PLUS_EP_ZOO_DIR" not in os.environ:
        os.environ["PLUS_EP_ZOO_DIR"] = str(config.zoo_dir())
    if "PLUS_EP_CACHE_DIR" not in os.environ:
        if os.environ.get("PYTEST_XDIST_WORKER"):     # pytest -n: the workers share one (writes are atomic)
            shared = tmp_path_factory.getbasetemp().parent / "plus_ep_cache"
            shared.mkdir(exist_ok=True)
            os.environ["PLUS_EP_CACHE_DIR"] = str(shared)
        else:
            os.environ["PLUS_EP_CACHE_DIR"] = str(tmp_path_factory.mktemp("plus_ep_cache"))
    yield


@pytest.hookimpl(optionalhook=True)      # an xdist hook: pytest without xdist ignores it
def pytest_xdist_auto_num_workers(config):
    """`pytest -n auto`: one worker per core, at most 4 (each compiles kernels and loads ORT and torch)."""
    return max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


@pytest.fixture(scope="session")
def fake_cuda(tmp_path_factory):
    """The stand-in CUDA driver (tests/native/fake_cuda.c), built once: the launcher runs its host-staging
    twin against it on a CPU (set PLUS_EP_CUDA_LIBRARY to the returned path in a child process)."""
    import shutil
    import subprocess
    from pathlib import Path
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("needs a C compiler for the stand-in driver")
    root = Path(__file__).resolve().parents[1]
    out = tmp_path_factory.mktemp("fake_cuda") / "libfake_cuda.so"
    subprocess.run([gcc, "-std=c11", "-O1", "-fPIC", "-shared", f"-I{root / 'plus_ep' / 'native'}",
                    str(root / "tests" / "native" / "fake_cuda.c"), "-o", str(out), "-lpthread"], check=True)
    return out


@pytest.fixture(scope="session")
def library() -> str:
    """Path of the built launcher library; skips when `pip install -e .` has not built it."""
    from plus_ep.library import get_library_path
    try:
        return get_library_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))
