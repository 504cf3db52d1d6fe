"""The route side of the aligned GEMM path: PLUS_ALIGNED=1 is rendered only when the operands' rows are
provably whole 16-byte chunks (kernels/families/gemm/routes.gemm_rows_aligned); otherwise the templates check at run time."""
from __future__ import annotations

import pytest
from onnx import TensorProto

from plus_ep.kernels.families.gemm import configs as gemm_configs, sm90a_configs as gemm_sm90a_configs
from plus_ep.kernels.families.gemm import routes


@pytest.mark.parametrize("K,ldb,dtype,want", [
    (768, 768, TensorProto.FLOAT16, True),      # BERT-base projections
    (64, 128, TensorProto.FLOAT, True),         # fp32: 4 floats per chunk
    (68, 128, TensorProto.FLOAT, True),
    (68, 128, TensorProto.FLOAT16, False),      # 136 bytes per A row
    (768, 100, TensorProto.BFLOAT16, False),    # B rows of 200 bytes
    (45, 64, TensorProto.FLOAT, False),
    ("seq", 64, TensorProto.FLOAT16, False),    # symbolic K: no static proof
    (64, "2*seq", TensorProto.FLOAT16, False),
])
def test_rows_aligned(K, ldb, dtype, want):
    assert routes.gemm_rows_aligned(K, ldb, dtype) is want


def test_defines_carry_the_proof():
    for cfg in (gemm_configs.F16_CONFIGS[0], gemm_sm90a_configs.CONFIGS[0]):
        assert routes.gemm_defines(cfg, 1, 0, True)["PLUS_ALIGNED"] == 1
        assert routes.gemm_defines(cfg, 1, 1, False)["PLUS_ALIGNED"] == 0
        assert routes.gemm_defines(cfg, 2, 0)["PLUS_ALIGNED"] == 0
