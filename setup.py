"""Builds the native launcher (plus_ep/_launcher*.so) with the system C compiler.

Project metadata lives in pyproject.toml; this file only adds the C libraries and the wheel's tag. Both
are ordinary shared libraries, not importable Python modules: the launcher exports RegisterCustomOps and
the plugin-EP entry points for ONNX Runtime, the emulated driver the CUDA driver API (plain C11, no CUDA
toolkit or ONNX Runtime headers needed; the CUDA driver is dlopen'ed at run time). Neither has a
PyInit_ or links libpython, so one wheel serves every CPython 3.10+: it is tagged py3-none-<platform>
(tests/native/test_wheel.py checks the tag, the exports and the manylinux repair).
"""
import re
from pathlib import Path

import setuptools

# pyproject.toml's PEP 639 license metadata needs setuptools 77; older ones stop on it with a schema dump.
# pip's default build isolation brings a new one; --no-build-isolation uses the environment's.
_HAVE = tuple(int(x) for x in re.findall(r"\d+", setuptools.__version__)[:2])
if _HAVE < (77, 0):
    raise SystemExit(f"plus-ep: setuptools {setuptools.__version__} is too old to build it (needs >= 77): "
                     "pip install 'setuptools>=77', or drop --no-build-isolation")

from setuptools import Extension, setup  # noqa: E402
from setuptools.command.bdist_wheel import bdist_wheel  # noqa: E402  (setuptools >= 70.1)
from setuptools.command.build_ext import build_ext  # noqa: E402

NATIVE = Path("plus_ep") / "native"
SOURCES = ["dtype.c", "plan.c", "expr.c", "bind.c", "pack.c", "driver.c", "kernel.c", "sha256.c", "trust.c", "tmap.c", "ort_tensor.c",
           "ort_run.c", "ort_op.c", "ep_base.c", "ep_factory.c", "ep.c", "ep_memory.c", "ep_stream.c", "ep_context.c", "ep_chain.c"]
HEADERS = ["dtype.h", "plus_plan.h", "plan.h", "bind.h", "pack.h", "driver.h", "kernel.h", "ort_abi.h", "ort_tensor.h", "ort_run.h", "ep_abi.h", "ep.h",
           "ep_base.h", "ep_context.h", "sha256.h", "trust.h", "tmap.h"]
ABI = Path("kernels") / "templates" / "plus_abi.h"   # PlusArgs and the limits, shared with the kernels (plan.h)


class BuildLauncher(build_ext):
    """A plain shared library: export only RegisterCustomOps, not PyInit_<name>."""

    def get_export_symbols(self, ext):
        return []


class PlatformWheel(bdist_wheel):
    """py3-none-<platform>: the libraries are platform code but use no Python C API (no PyInit_, no
    libpython), so the wheel is not tied to one CPython version or ABI."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        _, _, plat = super().get_tag()
        return "py3", "none", plat


launcher = Extension(
    "plus_ep._launcher",
    sources=[str(NATIVE / s) for s in SOURCES],
    depends=[str(NATIVE / h) for h in HEADERS] + [str(ABI)],
    extra_compile_args=["-std=c11", "-O2", "-fvisibility=hidden", "-Wall", "-Wextra"],
    extra_link_args=["-Wl,--no-undefined", f"-Wl,--version-script={NATIVE / 'exports.map'}"],   # plugin-EP exports only
    libraries=["dl", "pthread"],
)

# The emulated CUDA driver (PLUS_EP_CUDA_LIBRARY=<it>): the launcher's driver entry points on the CPU,
# kernels executed by the PTX interpreter through callbacks plus_ep/verification/emulator.py registers.
emucuda = Extension(
    "plus_ep._emucuda",
    sources=[str(NATIVE / "emucuda.c")],
    extra_compile_args=["-std=c11", "-O2", "-fvisibility=hidden", "-Wall", "-Wextra"],
    extra_link_args=["-Wl,--no-undefined"],
    libraries=["pthread"],
)

setup(ext_modules=[launcher, emucuda], cmdclass={"build_ext": BuildLauncher, "bdist_wheel": PlatformWheel})
