"""The sm_90a wgmma GEMM template's menu compiled with NVRTC (no spills, static_asserts), and the
refusals of plain sm_90 and other math; the GPU half is tests/gpu/test_template_gemm_sm90a.py."""
from tests.support.template_gemm_sm90a_cases import (  # noqa: F401  (pytest collects these here)
    compiled, test_compiles_without_spills, test_menu_is_consistent, test_other_math_is_refused, test_plain_sm90_is_refused)
