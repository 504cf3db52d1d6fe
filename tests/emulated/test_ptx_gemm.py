"""The GEMM templates executed by the PTX interpreter (cases in tests/support/ptx_gemm_cases.py, shared
with the mutation tests)."""
from tests.support.ptx_gemm_cases import (  # noqa: F401  (pytest collects these here)
    test_gemm_on_interpreter)
