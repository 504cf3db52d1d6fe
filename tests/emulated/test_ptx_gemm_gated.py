"""Gated GEMMs (two products sharing A, one epilogue with both sums) on the PTX interpreter: every math path of
gemm.cuh and the wgmma template (cases in tests/support/ptx_gated_cases.py)."""
import pytest

from tests.support.ptx_gated_cases import CASES, check_gated


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1].id}-{c[2]}x{c[3]}x{c[4]}x{c[5]}" for c in CASES])
def test_gated_gemm_on_interpreter(case):
    check_gated(case)
