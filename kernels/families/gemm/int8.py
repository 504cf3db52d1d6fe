"""8-bit integer GEMMs (ONNX MatMulInteger, what graph_rewrites/contrib/quant.py folds a quantized MatMul into): the
gemm template with PLUS_MATH 3, whose mainloop multiplies int8/uint8 operands on the tensor cores (mma.sync
m16n8k32, exact s32 sums) and hands the epilogue the exact sum as an int; the epilogue's Cast to float, the scales,
the zero-point correction, bias, activation, residual and the requantization of the consumer are the subgraph's
element-wise ops. The same mma.sync menu on every arch; on sm_90a also the 8-bit TMA tiles (gemm_sm90a_ws.cuh, wgmma
k32) where the operands have tensor maps (routes.gemm_menu). Never split along K (the partial sums would go through
fp32 scratch)."""
from __future__ import annotations

from ...codegen import dtypes
from ...codegen.pull import RenderError, describe
from ....warehouse.families.gemm import QuantizedARoles

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


def quantizes_a(job) -> bool:
    """Whether the kernel quantizes A itself (QuantizedARoles: A is a float32 activation, the QuantizeLinear
    between it and the MatMulInteger is applied as each A tile is loaded, PLUS_A_QUANT)."""
    return isinstance(job.roles, QuantizedARoles)


def a_type(job, em, dta: int) -> int:
    """The 8-bit element type the mainloop multiplies for A: the QuantizeLinear's output type when the kernel
    quantizes A, else A's own."""
    return em.dtype(job.view.nodes[job.roles.quantize].output[0]) if quantizes_a(job) else dta


def a_quant_hook(job) -> str:
    """PLUS_A_QUANT and plus_a_quant (gemm.cuh) when the kernel quantizes A, else "": element (m, k) of the
    QuantizeLinear's output pulled from the float32 activation (its leading axes flattened into m), with the
    codegen's exact QuantizeLinear (round half to even, saturation, the zero point).

        x [B, S, K] f32 -> QuantizeLinear(x, s, z) uint8 -> MatMulInteger
        gives  plus_ab_t plus_a_quant(args, b, m, k)  = QuantizeLinear(x[m / S, m % S, k], s, z)"""
    if not quantizes_a(job):
        return ""
    q = job.view.nodes[job.roles.quantize]
    em = job.emitter()
    shape = em.shape(job.roles.a)
    if len(em.shape(q.output[0])) < 2 or len(shape) != len(em.shape(q.output[0])):
        raise RenderError(f"{describe(q)}: a quantized A is a matrix or a stack of rows")
    b_shape = em.shape(job.view.nodes[job.roles.gemm].input[1])
    if len(b_shape) != 2:
        raise RenderError(f"{describe(q)}: A is quantized in the kernel for a 2-D weight only")
    em.reset()
    val, ct = em.value(q.output[0], em.delinear("m", shape[:-1]) + ["k"])
    st = dtypes.storage(em.dtype(q.output[0]))
    return ("#define PLUS_A_QUANT 1\n"
            "PLUS_DEV plus_ab_t plus_a_quant(const PlusArgs& args, long long b, long long m, long long k) {\n"
            f"  (void)b;\n{em.take()}\n  return ({st})({val});\n}}\n")
