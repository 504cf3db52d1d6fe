"""The emulated CUDA driver (plus_ep/native/emucuda.c) reports the shared-memory opt-in limit the
launcher checks dynamic shared memory against and the SM count: kernels/arch.py's, arch by arch (the
arch's reference part: A100 108 SMs for sm_80, H100 SXM5 132 for sm_90/sm_90a, ...)."""
from __future__ import annotations

import ctypes

import pytest

from plus_ep.kernels import arch

CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97   # plus_ep/native/driver.h PLUS_CU_ATTR_SMEM_OPTIN
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 75, 76
CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16


@pytest.fixture(scope="module")
def emucuda():
    from plus_ep.verification.emulator import library_path
    try:
        lib = ctypes.CDLL(library_path())
    except (FileNotFoundError, OSError) as exc:
        pytest.skip(str(exc))
    before = [_attr(lib, a) for a in (CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                      CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                      CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                      CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)]
    yield lib
    lib.plus_emucuda_set_device(*before)     # the process's one loaded driver: leave it as found


def _attr(lib, attr: int) -> int:
    v = ctypes.c_int(-1)
    assert lib.cuDeviceGetAttribute(ctypes.byref(v), attr, 0) == 0
    return v.value


@pytest.mark.parametrize("name", arch.ARCHS)
def test_emulated_driver_agrees_with_the_arch_table(emucuda, name):
    from plus_ep.verification.emulator import device_attributes
    a = arch.get(name)
    emucuda.plus_emucuda_set_device(*device_attributes(name))
    assert (_attr(emucuda, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
            _attr(emucuda, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)) == a.cc
    assert _attr(emucuda, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN) == a.smem_per_block
    assert _attr(emucuda, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) == a.sms


def test_emulator_set_arch_reports_the_reference_part():
    """Emulator.set_arch (what verify and profile call) sets the device of the arch under test; it used to
    report 132 SMs for every arch."""
    from plus_ep.verification.emulator import Emulator
    try:
        emu = Emulator.get()
    except (FileNotFoundError, OSError) as exc:
        pytest.skip(str(exc))
    before = emu.arch
    try:
        seen = {}
        for name in ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100"):
            emu.set_arch(name)
            seen[name] = (_attr(emu.lib, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                          _attr(emu.lib, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
                          _attr(emu.lib, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
                          _attr(emu.lib, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN))
    finally:
        emu.set_arch(before)
    # A100, A40, GeForce RTX 4090, H100 SXM5; an arch newer than the table: its cc, the newest row's figures
    assert seen == {"sm_80": (8, 0, 108, 166912), "sm_86": (8, 6, 84, 101376), "sm_89": (8, 9, 128, 101376),
                    "sm_90": (9, 0, 132, 232448), "sm_90a": (9, 0, 132, 232448), "sm_100": (10, 0, 132, 232448)}
    assert {arch.get(n).part for n in ("sm_80", "sm_86", "sm_89", "sm_90a")} == \
        {"A100", "A40", "GeForce RTX 4090", "H100 SXM5"}
