"""The one op vocabulary: for each ONNX operator (default domain) what lowering, codegen, the
+Graph interpreter and the reports need to know about it.

    OPS["Tanh"]  -> Op(kind="elementwise", tag="tanh", role=None, c="f:tanhf({x})")

* ``kind`` — how lowering turns it into +Loops: ``elementwise``, ``view`` (no loops; re-indexes its
  input), ``injective``, ``reduce``, ``dot``, ``composite`` (lowered through its decomposition);
  ``None`` for ops that are only named here for their role (Shape, Size).
* ``role`` — ``alias`` (same elements in the same order: Reshape family, Identity, Dropout; no
  kernel of its own), ``view`` (re-indexes: Transpose), ``shape`` (reads only its input's shape),
  ``guard`` (IsNaN, the NaN guard's test), ``reduction`` (a reduction over an axis set), ``row``
  (a composite row operation: softmax, normalisations), ``dot`` (the GEMM skeleton).
* ``c`` — the C element expression, read by ``kernels.cexpr``: ``f:FMT`` a float unary function of
  ``{x}``; ``bin:OP`` / ``cmp:OP`` a binary operator (arithmetic / comparison); ``@name`` one of
  cexpr's own emitters. ``None`` when the op has no element expression.
* ``index`` — the codegen computes it by re-indexing its input(s) (kernels.pull): views, Expand,
  Slice, Split, Concat, Gather, GatherElements, Tile, Trilu, Cast, CastLike.
* ``template`` — only a template computes it (MatMul/Gemm, reductions, row composites).
* ``unrenderable`` — why codegen cannot render the op (lowering accepts it; with kernels
  requested identification leaves it out). ``None`` for every renderable op.

An op is *renderable* when it has an element expression, an index rule or a template. A test
asserts every op lowering accepts is renderable or declares why not.

Contrib ops (``com.microsoft``: Attention, SkipLayerNormalization, FastGelu, GroupQueryAttention,
MatMulNBits, ...; ORT's SimplifiedLayerNormalization) are not entries here: graph_rewrites/contrib owns
them and replaces each by the standard-op subgraph computing it before lowering, so this vocabulary
covers what lowering, codegen and the interpreter meet.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto, helper


@dataclass(frozen=True)
class Op:
    name: str
    kind: str | None
    role: str | None = None
    c: str | None = None
    index: bool = False
    template: bool = False
    tag: str | None = None                 # +Loop statement tag (default: lowerCamel of the name)
    reduce: str | None = None              # row reduction kind for the row template
    unrenderable: str | None = None

    @property
    def renderable(self) -> bool:
        return self.unrenderable is None and (self.c is not None or self.index or self.template)


_OPS: list[Op] = []


def _add(name, kind, **kw):
    _OPS.append(Op(name, kind, **kw))


# ---- element-wise ----------------------------------------------------------------------------
for _n, _op in (("Add", "+"), ("Sub", "-"), ("Mul", "*"), ("Div", "/")):
    _add(_n, "elementwise", c=f"bin:{_op}")
for _n, _op in (("Equal", "=="), ("Less", "<"), ("Greater", ">"), ("LessOrEqual", "<="),
                ("GreaterOrEqual", ">="), ("And", "&&"), ("Or", "||"), ("Xor", "!=")):
    _add(_n, "elementwise", c=f"cmp:{_op}")
for _n, _fmt in (("Relu", "(({x}) < 0.0f ? 0.0f : ({x}))"), ("Sigmoid", "(1.0f / (1.0f + expf(-{x})))"),
                 ("Tanh", "tanhf({x})"), ("Erf", "erff({x})"), ("Exp", "expf({x})"), ("Log", "logf({x})"),
                 ("Sqrt", "sqrtf({x})"), ("Reciprocal", "(1.0f / {x})"), ("Abs", "fabsf({x})"),
                 ("Sin", "sinf({x})"), ("Cos", "cosf({x})"), ("Floor", "floorf({x})"), ("Ceil", "ceilf({x})"),
                 ("Round", "rintf({x})"), ("Sign", "(isnan({x}) ? ({x}) : (float)(({x} > 0.0f) - ({x} < 0.0f)))"),
                 ("Softplus", "(({x}) > 0.0f ? ({x}) + log1pf(expf(-({x}))) : log1pf(expf({x})))"), ("Softsign", "({x} / (1.0f + fabsf({x})))"),
                 ("Mish", "({x} * tanhf(log1pf(expf({x}))))")):
    _add(_n, "elementwise", c=f"f:{_fmt}")
for _n in ("Pow", "Max", "Min", "Where", "Mod", "Clip", "Not", "Neg", "Gelu", "LeakyRelu", "Elu", "Selu",
           "HardSigmoid", "HardSwish", "IsInf", "BitwiseNot", "BitwiseAnd", "BitwiseOr", "PRelu", "Sum", "Mean"):
    _add(_n, "elementwise", c=f"@{_n}")
_add("IsNaN", "elementwise", role="guard", c="@IsNaN")
# y = saturate(round_half_even(x / scale) + zero_point) and y = (x - zero_point) * scale: per tensor, per axis or
# blocked scales (quant_layout); the codegen indexes the scale and zero point itself (kernels.pull)
_add("QuantizeLinear", "elementwise", c="@QuantizeLinear", tag="quantize")
_add("DequantizeLinear", "elementwise", c="@DequantizeLinear", tag="dequantize")
_add("Cast", "elementwise", index=True)
_add("CastLike", "elementwise", index=True)

# ---- views and aliases -----------------------------------------------------------------------
for _n in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"):
    _add(_n, "view", role="alias", index=True)
_add("Transpose", "view", role="view", index=True)

# ---- injective -------------------------------------------------------------------------------
for _n in ("Expand", "Slice", "Concat", "Split", "Gather", "Tile", "Trilu", "Pad", "GatherElements"):
    _add(_n, "injective", index=True)

# ---- reductions, GEMM, composites ------------------------------------------------------------
for _n, _kind in (("ReduceSum", "sum"), ("ReduceMean", "mean"), ("ReduceMax", "max"), ("ReduceMin", "min"),
                  ("ReduceProd", "prod"), ("ReduceL1", "l1"), ("ReduceL2", "l2"), ("ReduceLogSumExp", "lse"),
                  ("ReduceSumSquare", "sumsq")):
    _add(_n, "reduce", role="reduction", template=True, tag=_n[:1].lower() + _n[1:], reduce=_kind)
for _n in ("ArgMax", "ArgMin"):
    _add(_n, "reduce", role="reduction", tag=_n[:1].lower() + _n[1:],
         unrenderable="arg-reductions have no template (the row template reduces values only)")
for _n in ("MatMul", "Gemm", "MatMulInteger"):
    _add(_n, "dot", role="dot", template=True, tag="dot")
for _n in ("Softmax", "LogSoftmax", "LayerNormalization", "RMSNormalization"):
    _add(_n, "composite", role="row", template=True)

# ---- shape-only ------------------------------------------------------------------------------
_add("Shape", None, role="shape", index=True)
_add("Size", None, role="shape")

OPS: dict[str, Op] = {o.name: o for o in _OPS}


def attr(node, name: str, default=None):
    """The value of a node attribute (ints, floats, strings as onnx gives them), else `default`."""
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def get(op_type: str, domain: str = "") -> Op | None:
    """The vocabulary entry of a node's op, or None (other domains, ops nobody knows)."""
    return OPS.get(op_type) if domain in ("", "ai.onnx") else None


def of_kind(*kinds: str) -> frozenset:
    return frozenset(o.name for o in _OPS if o.kind in kinds)


def with_role(*roles: str) -> frozenset:
    return frozenset(o.name for o in _OPS if o.role in roles)


def tag_of(op_type: str) -> str:
    """The +Loop statement tag of an op (``dot`` for MatMul/Gemm, ``reduceSum``, ``tanh``...)."""
    o = OPS.get(op_type)
    if o is not None and o.tag:
        return o.tag
    return op_type[:1].lower() + op_type[1:]


def unrenderable_reason(node, view=None) -> str | None:
    """Why the codegen cannot render this node (None when it can). Op-level first, then the
    node-level conditions the emitters need (constants they read at render time)."""
    o = get(node.op_type, node.domain)
    if o is None:
        return f"{node.op_type} is not in the op vocabulary"
    if not o.renderable:
        return o.unrenderable or f"{node.op_type} has no element expression, index rule or template"
    if view is None:
        return None
    if node.op_type == "Trilu" and len(node.input) > 1 and node.input[1] and view.const(node.input[1]) is None:
        return "Trilu's k is not a constant"
    if node.op_type == "Pad":
        return pad_reason(node, view)
    if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
        return quant_reason(node, view)
    if node.op_type == "Dropout" and len(node.output) > 1 and node.output[1] and (
            node.output[1] in view.consumers or node.output[1] in view.outputs):
        return "Dropout's mask output is read; the codegen passes only its data through"
    if node.op_type == "Dropout" and len(node.input) > 2 and node.input[2]:
        mode = view.const(node.input[2])
        if mode is None or mode.size != 1 or bool(mode.reshape(-1)[0]):
            return "Dropout's training_mode is not a constant false: it may drop elements at random"
    return None


def pad_amounts(node, view):
    """(begins, ends) per axis of a constant-mode Pad whose pads (and axes) are constants, else None."""
    if attr(node, "mode", b"constant") not in (b"constant", "constant") or len(node.input) < 2 or not node.input[1]:
        return None
    pads = view.const(node.input[1])
    rank = len(view.shape(node.input[0]) or [])
    if pads is None or not rank:
        return None
    pads = [int(p) for p in np.asarray(pads).reshape(-1)]
    axes = list(range(rank))
    if len(node.input) > 3 and node.input[3]:
        a = view.const(node.input[3])
        if a is None:
            return None
        axes = [int(x) % rank for x in np.asarray(a).reshape(-1)]
    if len(pads) != 2 * len(axes):
        return None
    begins, ends = [0] * rank, [0] * rank
    for k, ax in enumerate(axes):
        begins[ax], ends[ax] = pads[k], pads[k + len(axes)]
    return begins, ends


def pad_reason(node, view) -> str | None:
    if pad_amounts(node, view) is None:
        return "Pad is rendered only in constant mode with constant pads"
    if len(node.input) > 2 and node.input[2] and view.const(node.input[2]) is None:
        return "Pad's constant_value is not a constant"
    return None


ALIAS_OPS = with_role("alias")          # no kernel of their own: the reports do not count them
SHAPE_OPS = with_role("shape")          # read only a shape: never data nodes


# ---- QuantizeLinear / DequantizeLinear ---------------------------------------------------------------
INT_RANGES = {TensorProto.INT8: (-128, 127), TensorProto.UINT8: (0, 255), TensorProto.INT16: (-32768, 32767),
              TensorProto.UINT16: (0, 65535), TensorProto.INT4: (-8, 7), TensorProto.UINT4: (0, 15)}
FLOAT8 = (TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2)
PACKED = (TensorProto.INT4, TensorProto.UINT4)       # two elements per byte, the low nibble first


def quant_layout(node, x_rank: int, scale_shape) -> tuple:
    """How a QuantizeLinear/DequantizeLinear node indexes its scale (and zero point), as onnx.reference
    decides: ``("tensor", None, None)`` a single scale; ``("axis", a, None)`` a 1-D scale along axis a;
    ``("block", a, B)`` a scale of x's rank with ceil(D_a / B) entries along axis a.

        quant_layout(dq, 2, [64])       -> ("axis", 1, None)      (axis attribute 1, the default)
    """
    shape = list(scale_shape)
    if int(np.prod(shape)) == 1:
        return "tensor", None, None
    axis = attr(node, "axis", 1) % x_rank
    block = int(attr(node, "block_size", 0) or 0)
    return ("block", axis, block) if block else ("axis", axis, None)


def quant_types(node, view) -> tuple:
    """(input element type, output element type) of a QuantizeLinear/DequantizeLinear node."""
    x = view.dtypes.get(node.input[0])
    if node.op_type == "DequantizeLinear":
        out = attr(node, "output_dtype", 0) or view.dtypes.get(node.input[1])
        return x, out
    zp = node.input[2] if len(node.input) > 2 and node.input[2] else None
    out = view.dtypes.get(zp) if zp else (attr(node, "output_dtype", 0) or TensorProto.UINT8)
    return x, out


def quant_reason(node, view) -> str | None:
    """Why the codegen cannot render this Q/DQ node (None when it can)."""
    src, dst = quant_types(node, view)
    q = dst if node.op_type == "QuantizeLinear" else src
    if q not in INT_RANGES and q not in FLOAT8 and not (node.op_type == "DequantizeLinear" and q == TensorProto.INT32):
        name = TensorProto.DataType.Name(q) if q in TensorProto.DataType.values() else str(q)
        return f"{node.op_type} to/from {name} (the kernels take int8/uint8/int16/uint16/int4/uint4, float8e4m3fn, float8e5m2)"
    if node.op_type == "QuantizeLinear" and dst in PACKED:
        return ("QuantizeLinear writes packed int4/uint4 (two elements per byte): a kernel cannot store one nibble "
                "without racing its neighbour")
    if attr(node, "precision", 0):
        return "QuantizeLinear's precision attribute is not rendered"
    zp = node.input[2] if len(node.input) > 2 and node.input[2] else None
    if q in FLOAT8 and zp and view is not None:
        z = view.const(zp)
        if z is None or np.asarray(z).astype(np.float32).any():
            return f"{node.op_type}'s float8 zero point is not a constant 0 (ONNX leaves a non-zero one undefined)"
    return None
