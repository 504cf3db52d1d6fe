"""The sm_90a wgmma GEMM template on an H100-class GPU against torch, and its throughput report (cases in
tests/support/template_gemm_sm90a_cases.py; tests/emulated/test_ptx_gpu_backend.py runs small ones on the
PTX interpreter)."""
from tests.support.template_gemm_sm90a_cases import (  # noqa: F401  (pytest collects these here)
    gpu, test_gemm_matches_torch, test_throughput_report)
