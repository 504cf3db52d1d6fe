"""The mma/SIMT GEMM template's menu compiled with NVRTC for every arch, limits checked against the
compiled kernels; the GPU half of these cases is tests/gpu/test_template_gemm.py."""
from tests.support.template_gemm_cases import (  # noqa: F401  (pytest collects these here)
    compiled, test_compiles_without_spills, test_menu_is_small_and_consistent)
