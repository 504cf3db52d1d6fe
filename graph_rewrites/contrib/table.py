"""The contrib ops PlusEP expands: name, domains, expansion function, one line on what it becomes."""
from __future__ import annotations

from dataclasses import dataclass

from . import activations, attention, gqa, norms, quant
from .emit import MS_DOMAIN, Emitter, Facts, Refused


@dataclass(frozen=True)
class ContribOp:
    name: str
    domains: tuple
    expand: object          # fn(Emitter) writing the expansion, raising Refused
    becomes: str            # one line: what the expansion is (explain, README)


_TABLE = [
    ContribOp("Attention", (MS_DOMAIN,), attention.attention,
              "Q, K, V projections (three MatMul + bias) and softmax(QKᵀ·scale + mask)·V"),
    ContribOp("MultiHeadAttention", (MS_DOMAIN,), attention.multi_head_attention,
              "bias adds, head transposes, past concat and softmax(QKᵀ·scale + mask)·V"),
    ContribOp("GroupQueryAttention", (MS_DOMAIN,), gqa.group_query_attention,
              "rotary, KV-cache update, grouped heads and causal softmax(QKᵀ·scale)·V"),
    ContribOp("RotaryEmbedding", (MS_DOMAIN,), attention.rotary_embedding,
              "cos/sin gathers and the rotate-half (or interleaved) element-wise chain"),
    ContribOp("SkipLayerNormalization", (MS_DOMAIN,), lambda e: norms.skip_layer_norm(e, False),
              "residual (+ bias) add and LayerNormalization"),
    ContribOp("SkipSimplifiedLayerNormalization", (MS_DOMAIN,), lambda e: norms.skip_layer_norm(e, True),
              "residual (+ bias) add and the RMS-norm chain"),
    ContribOp("SimplifiedLayerNormalization", ("", "ai.onnx", MS_DOMAIN), norms.simplified_layer_norm,
              "the RMS-norm chain"),
    ContribOp("EmbedLayerNormalization", (MS_DOMAIN,), norms.embed_layer_norm,
              "word/position/segment Gathers, adds, LayerNormalization and the mask-index ReduceSum"),
    ContribOp("BiasGelu", (MS_DOMAIN,), activations.bias_gelu, "bias add and the erf GELU chain"),
    ContribOp("Gelu", (MS_DOMAIN,), activations.gelu, "the erf GELU chain"),
    ContribOp("FastGelu", (MS_DOMAIN,), activations.fast_gelu, "bias add and the tanh GELU chain"),
    ContribOp("QuickGelu", (MS_DOMAIN,), activations.quick_gelu, "x·sigmoid(alpha·x)"),
    ContribOp("BiasAdd", (MS_DOMAIN,), activations.bias_add, "two adds"),
    ContribOp("MatMulNBits", (MS_DOMAIN,), quant.matmul_nbits,
              "dequantisation of the packed weights (no data kernel) and a MatMul (+ bias)"),
    ContribOp("DynamicQuantizeLinear", ("", "ai.onnx"), quant.dynamic_quantize_linear,
              "min/max reductions, the uint8 scale and zero point, and a QuantizeLinear"),
    ContribOp("QLinearMatMul", ("", "ai.onnx"), quant.qlinear_matmul,
              "MatMulInteger, one float multiplier per column and a QuantizeLinear (requantization)"),
    ContribOp("MatMulIntegerToFloat", (MS_DOMAIN,), quant.matmul_integer_to_float,
              "MatMulInteger, Cast and the scales' product (+ bias)"),
    ContribOp("DynamicQuantizeMatMul", (MS_DOMAIN,), quant.dynamic_quantize_matmul,
              "DynamicQuantizeLinear of A, MatMulInteger, Cast and the scales' product (+ bias)"),
]
CONTRIB: dict = {(d, op.name): op for op in _TABLE for d in op.domains}
# standard ops rewritten when their inputs allow (quant.folds): quantized MatMuls into the 8-bit GEMM's form
FOLDS = {"MatMul": ContribOp("MatMul", ("", "ai.onnx"), quant.qdq_matmul,
                             "MatMulInteger of the stored 8-bit operands, the scales and the zero-point correction"),
         "MatMulInteger": ContribOp("MatMulInteger", ("", "ai.onnx"), quant.matmul_integer_zero_point,
                                    "MatMulInteger without A's zero point, minus zero point x the weight's column sums")}


def contrib_op(node) -> ContribOp | None:
    """The table entry of a node (None when it is not a contrib op this module expands)."""
    return CONTRIB.get((node.domain, node.op_type))


def fold_op(node, facts: Facts) -> ContribOp | None:
    """The fold of a standard node whose inputs allow it (quant.folds), else None."""
    return FOLDS[node.op_type] if quant.folds(node, facts) else None


def expand_node(node, facts: Facts) -> Emitter:
    """The expansion of one node (an Emitter holding its nodes and initializers); raises Refused."""
    op = contrib_op(node) or fold_op(node, facts)
    if op is None:
        raise Refused(f"{node.domain or 'ai.onnx'}::{node.op_type} is not a contrib op PlusEP expands")
    e = Emitter(node, facts)
    memo = dict(facts.shared), dict(facts.shared_nodes)
    try:
        op.expand(e)
        produced = {o for n in e.nodes for o in n.output}
        missing = [o for o in node.output if o and o not in produced]
        if missing:
            raise Refused(f"the expansion does not produce output '{missing[0]}'")
    except Exception as exc:       # a refused node leaves no shared tensor behind for the next one
        facts.shared, facts.shared_nodes = memo
        if isinstance(exc, Refused):
            raise
        if isinstance(exc, (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError)):
            raise Refused(f"its inputs do not fit the op ({type(exc).__name__}: {exc})") from None
        raise
    return e
