"""kernels/compile/ptx.py compiles PTX for the interpreter with the virtual target (compute_XX: NVRTC stops
after NVVM, no ptxas). The interpreter runs that PTX in place of the shipped kernel's, so the text must
be the one the real sm_XX compile (the kernel cache's, kernels/compile/nvrtc.py) produces."""
from __future__ import annotations

import pytest

from plus_ep.kernels.compile import nvrtc
from plus_ep.kernels.compile.ptx import compile_ptx, ptx_options
from tests.support.faults import src


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_virtual_target_ptx_is_the_real_compiles(arch):
    virtual = compile_ptx(src(), arch, name="scale.cu", use_cache=False)
    real = nvrtc.compile_cubin(src(), arch, name="scale.cu").ptx
    assert virtual.strip() and virtual == real.rstrip("\0 ")


def test_virtual_options_drop_only_ptxas():
    full, virtual = nvrtc.base_options("sm_90a"), ptx_options("sm_90a")
    assert "--gpu-architecture=compute_90a" in virtual and "--gpu-architecture=sm_90a" in full
    assert [o for o in full if not o.startswith(("-Xptxas", "--gpu-architecture"))] == \
           [o for o in virtual if not o.startswith("--gpu-architecture")]
