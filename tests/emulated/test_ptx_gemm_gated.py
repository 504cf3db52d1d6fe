"""Gated GEMMs (two products sharing A, one epilogue with both sums) and ragged groups (members of different N)
on the PTX interpreter: every math path of gemm.cuh and the wgmma template (cases in
tests/support/ptx_gated_cases.py)."""
import pytest

from tests.support.ptx_gated_cases import CASES, RAGGED_CASES, check_gated, check_ragged


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1].id}-{c[2]}x{c[3]}x{c[4]}x{c[5]}" for c in CASES])
def test_gated_gemm_on_interpreter(case):
    check_gated(case)


@pytest.mark.parametrize("case", RAGGED_CASES, ids=[f"{c[0]}-{c[1].id}-{c[2]}x{c[3]}x{c[4]}" for c in RAGGED_CASES])
def test_ragged_group_on_interpreter(case):
    check_ragged(case)
