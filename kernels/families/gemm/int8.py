"""8-bit integer GEMMs (ONNX MatMulInteger, what graph_rewrites/contrib/quant.py folds a quantized MatMul into): the
gemm template with PLUS_MATH 3, whose mainloop multiplies int8/uint8 operands on the tensor cores (mma.sync
m16n8k32, exact s32 sums) and hands the epilogue the exact sum as an int; the epilogue's Cast to float, the scales,
the zero-point correction, bias, activation, residual and the requantization of the consumer are the subgraph's
element-wise ops. The same mma.sync menu on every arch (sm_90a included: no 8-bit wgmma template yet), never split
along K (the partial sums would go through fp32 scratch)."""
from __future__ import annotations

from ...codegen import dtypes
from ...codegen.pull import RenderError, describe

def check(seed, dta: int, dtb: int) -> None:
    """A MatMulInteger the 8-bit path renders: int8/uint8 operands and no zero point (the fold moves zero points into
    the float epilogue; graph_rewrites/contrib/quant.py)."""
    if dta not in dtypes.INT8 or dtb not in dtypes.INT8:
        raise RenderError(f"{describe(seed)}: MatMulInteger operand types {dta}/{dtb} (the 8-bit GEMM takes int8 and "
                          "uint8)")
    if any(len(seed.input) > k and seed.input[k] for k in (2, 3)):
        raise RenderError(f"{describe(seed)}: MatMulInteger with zero points (the 8-bit GEMM multiplies the stored "
                          "integers; a constant weight's zero-point correction is folded into the epilogue)")

def b_typedef(em, seed) -> str:
    """plus_b_t for a B whose signedness differs from A's (u8 activations times s8 weights)."""
    a, b = seed.input[0], seed.input[1]
    if em.dtype(a) == em.dtype(b):
        return ""
    return f"#define PLUS_HAS_B_T 1\ntypedef {dtypes.storage(em.dtype(b))} plus_b_t;\n"
