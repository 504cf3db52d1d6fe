"""The emulated CUDA driver (plus_ep/native/emucuda.c) reports the shared-memory opt-in limit the
launcher checks dynamic shared memory against; it must be kernels/arch.py's, arch by arch."""
from __future__ import annotations

import ctypes

import pytest

from plus_ep.kernels import arch

CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97   # plus_ep/native/driver.h PLUS_CU_ATTR_SMEM_OPTIN
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 75, 76


@pytest.fixture(scope="module")
def emucuda():
    from plus_ep.emulator import library_path
    try:
        lib = ctypes.CDLL(library_path())    # its own handle: the cc set here stays in this test's copy
    except (FileNotFoundError, OSError) as exc:
        pytest.skip(str(exc))
    before = lib.plus_emucuda_get_cc()
    yield lib
    lib.plus_emucuda_set_cc(before // 10, before % 10)


def _attr(lib, attr: int) -> int:
    v = ctypes.c_int(-1)
    assert lib.cuDeviceGetAttribute(ctypes.byref(v), attr, 0) == 0
    return v.value


@pytest.mark.parametrize("name", arch.ARCHS)
def test_emulated_driver_agrees_with_the_arch_table(emucuda, name):
    a = arch.get(name)
    emucuda.plus_emucuda_set_cc(a.major, a.minor)
    assert (_attr(emucuda, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
            _attr(emucuda, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)) == a.cc
    assert _attr(emucuda, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN) == a.smem_per_block
