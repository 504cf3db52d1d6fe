"""The mma/SIMT GEMM template on an NVIDIA GPU against a numpy reference (cases in
tests/support/template_gemm_cases.py; tests/emulated/test_ptx_gpu_backend.py runs small ones on the PTX
interpreter)."""
from tests.support.template_gemm_cases import (  # noqa: F401  (pytest collects these here)
    gpu, test_gemm_matches_reference)
