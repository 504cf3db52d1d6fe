"""Quantized ops as standard ONNX: MatMulNBits, DynamicQuantizeLinear, QLinearMatMul and the contrib ops ORT's
quantizer and graph optimizer write for transformers (MatMulIntegerToFloat, DynamicQuantizeMatMul).

Integer and float8 semantics stay in QuantizeLinear, DequantizeLinear and MatMulInteger, which lowering
and the codegen take as ops of the vocabulary (graph_rewrites/ops.py): round half to even, saturation, zero
points and per-axis or blocked scales are theirs, so an expansion writes the rest with plain ops (Reduce*,
Min/Max, Div, Cast, Mul, Add).

MatMulNBits: a weight-only quantised GEMM (onnxruntime-genai's int4 weights, ORT's MatMulNBitsQuantizer).

B is uint8 [N, k_blocks, blob] (each byte holds 8/bits values, the low bits first), scales [N, k_blocks]
(or flat), zero_points either packed like B ([N, ceil(k_blocks·bits/8)], default 2^(bits-1)) or in the
scales' type ([N, k_blocks]); element k of column n is ``(q[n,k] - zp[n, k // block]) · scale[n, k //
block]``. The expansion dequantises B with standard ops on the packed initializers (BitShift,
BitwiseAnd / Sub, Cast, Sub, Mul, Reshape, Transpose): those nodes read no graph-input data, so
identification sees a plain MatMul + bias whose B comes from memory, and the int4 GEMM pattern
(warehouse/families/gemm_nbits.py) takes the packed weights into the kernel instead.

ORT's `accuracy_level` only allows its CPU kernel to compute with lower-precision activations (level 4:
int8); the expansion computes at the activations' precision, which is the op's definition."""
from __future__ import annotations

import json

import numpy as np
from onnx import TensorProto, helper

from .emit import Emitter, Refused, attr, inp, out

DECODER = "plus_ep.nbits "      # doc_string prefix of the node ending a weight-dequantisation chain


def unpack(e: Emitter, packed, bits: int, rank: int):
    """uint8 [..., m] of rank `rank` -> uint8 [..., m · 8/bits], the low bits first."""
    per = 8 // bits
    if per == 1:
        return packed
    mask = (1 << bits) - 1
    parts = []
    for j in range(per):
        v = packed if j == 0 else e.op("BitShift", packed, e.const(np.uint8(bits * j)), direction="RIGHT")
        if j < per - 1:
            if e.opset >= 18:
                v = e.op("BitwiseAnd", v, e.const(np.uint8(mask)))
            else:                                     # v - (v >> bits << bits)
                hi = e.op("BitShift", e.op("BitShift", v, e.const(np.uint8(bits)), direction="RIGHT"),
                          e.const(np.uint8(bits)), direction="LEFT")
                v = e.op("Sub", v, hi)
        parts.append(e.unsqueeze(v, [-1]))
    return e.reshape(e.op("Concat", *parts, axis=-1), [0] * (rank - 1) + [-1])


def dequantized_weight(e: Emitter, n):
    """The [K, N] weight of MatMulNBits node `n`, in the scales' element type. Equal constants of the chain are
    one initializer: the chain moves into its GEMM's fused node (decoders.py), two of them into a gated GEMM's,
    and every initializer it reads is an input of that node (limits.MAX_IN)."""
    e.one_const = {}
    b, scales, zp = inp(n, 1), inp(n, 2), inp(n, 3)
    K, N, bits, bs = (int(attr(n, a)) for a in ("K", "N", "bits", "block_size"))
    if bits not in (2, 4, 8):
        raise Refused(f"bits={bits} (2, 4 and 8 expand)")
    dt = e.need_float(scales)
    blocks = -(-K // bs)
    if e.facts.dtype.get(b) != TensorProto.UINT8:
        raise Refused("B is not uint8")
    qb = e.reshape(b, [N, blocks, bs * bits // 8])
    q = unpack(e, qb, bits, 3)                                       # [N, blocks, bs] uint8
    qf = e.cast(q, dt)
    sc = e.reshape(scales, [N, blocks, 1])
    if zp is None:
        zpf = e.scalar(float(1 << (bits - 1)), dt)
    elif e.facts.dtype.get(zp) == TensorProto.UINT8:
        per_row = -(-blocks * bits // 8)
        zq = unpack(e, e.reshape(zp, [N, per_row]), bits, 2)         # [N, per_row · 8/bits]
        zq = e.slice(zq, 0, blocks, 1) if per_row * 8 // bits != blocks else zq
        zpf = e.reshape(e.cast(zq, dt), [N, blocks, 1])
    elif e.facts.dtype.get(zp) == dt:
        zpf = e.reshape(zp, [N, blocks, 1])
    else:
        raise Refused("zero_points of a type other than uint8 or the scales' type")
    w = e.reshape(e.op("Mul", e.op("Sub", qf, zpf), sc), [N, blocks * bs])
    if blocks * bs != K:
        w = e.slice(w, 0, K, 1)
    out = e.op("Transpose", w, perm=[1, 0])                          # [K, N]
    # what a kernel needs to decode the weight itself (graph_rewrites/contrib/decoders.py)
    e.nodes[-1].doc_string = DECODER + json.dumps({"K": K, "N": N, "bits": bits, "block_size": bs, "packed": b,
                                                    "scales": scales, "zero_points": zp}, sort_keys=True)
    return out


def matmul_nbits(e: Emitter):
    """MatMulNBits(A, B, scales, zero_points, g_idx, bias) = A · dequant(B) + bias."""
    n = e.node
    if inp(n, 4):
        raise Refused("g_idx (act-order) is given; it does not expand")
    a = inp(n, 0)
    dt = e.need_float(a)
    if e.facts.dtype.get(inp(n, 2)) != dt:
        raise Refused("scales and A have different element types")
    w = dequantized_weight(e, n)
    bias = inp(n, 5)
    e.op("MatMul", a, w, out=None if bias else out(n, 0))
    if bias:
        e.op("Add", e.nodes[-1].output[0], bias, out=out(n, 0))


# ---- 8-bit quantization ----------------------------------------------------------------------------------
def _all_axes(e: Emitter, x):
    rank = e.facts.rank(x)
    if rank is None:
        raise Refused(f"the rank of '{x}' is not known")
    return list(range(rank))


def _dynamic_params(e: Emitter, x, scale_out=None, zp_out=None):
    """The uint8 scale and zero point onnxruntime's DynamicQuantizeLinear takes for float32 `x`: lo = min(0, min x),
    hi = max(0, max x), scale = (hi - lo) / 255 (1 when hi == lo), zero point = round(clip(0 - lo / scale, 0, 255))."""
    if e.need_float(x) != TensorProto.FLOAT:
        raise Refused(f"'{x}' is not float32 (dynamic quantization expands for float32)")
    axes = _all_axes(e, x)
    f = TensorProto.FLOAT
    zero = e.scalar(0.0, f)
    lo = e.op("Min", e.reduce("ReduceMin", x, axes, keepdims=0), zero)
    hi = e.op("Max", e.reduce("ReduceMax", x, axes, keepdims=0), zero)
    span = e.op("Sub", hi, lo)
    scale = e.op("Where", e.op("Equal", span, zero), e.scalar(1.0, f), e.op("Div", span, e.scalar(255.0, f)),
                 out=scale_out)
    zpf = e.op("Round", e.op("Clip", e.op("Sub", zero, e.op("Div", lo, scale)), zero, e.scalar(255.0, f)))
    return scale, e.op("Cast", zpf, to=TensorProto.UINT8, out=zp_out)


def dynamic_quantize_linear(e: Emitter):
    """ONNX DynamicQuantizeLinear (uint8) as onnxruntime computes it: _dynamic_params, then QuantizeLinear."""
    n = e.node
    x = inp(n, 0)
    scale, zp = _dynamic_params(e, x, out(n, 1), out(n, 2))
    e.op("QuantizeLinear", x, scale, zp, out=out(n, 0))


def _int_product(e: Emitter, a, b, za, zb):
    """MatMulInteger(a, b, za, zb) as float32 (int32 sums, then the one rounding of Cast)."""
    for t, role in ((a, "A"), (b, "B")):
        if e.facts.dtype.get(t) not in (TensorProto.INT8, TensorProto.UINT8):
            raise Refused(f"{role} '{t}' is not int8 or uint8")
    return e.cast(e.op("MatMulInteger", a, b, za, zb), TensorProto.FLOAT)


def _per_tensor(e: Emitter, s):
    r = e.facts.rank(s)       # None: a scale this expansion computed (a scalar)
    if r is not None and (r > 1 or (r == 1 and e.facts.dim(s, 0) != 1)):
        raise Refused(f"A's scale '{s}' is not per tensor (a per-row A scale does not expand)")


def _column_scale(e: Emitter, s):
    """A per-tensor ([] or [1]) or per-column ([N]) scale, as MatMul's output broadcasts it."""
    r = e.facts.rank(s)
    if r is None or r > 1:
        raise Refused(f"scale '{s}' is neither a scalar nor a 1-D per-column vector")
    return s


def qlinear_matmul(e: Emitter):
    """ONNX QLinearMatMul: y = saturate(round(sum (a - za)(b - zb) · (sa · sb / sy)) + zy), the int32 sums
    requantized with one float multiplier per column as onnxruntime does."""
    n = e.node
    a, sa, za, b, sb, zb, sy, zy = (inp(n, k) for k in range(8))
    for t in (sa, sb, sy):
        if e.facts.dtype.get(t) != TensorProto.FLOAT:
            raise Refused(f"scale '{t}' is not float32")
    _per_tensor(e, sa)
    acc = _int_product(e, a, b, za, zb)
    mult = e.op("Div", e.op("Mul", sa, _column_scale(e, sb)), sy)
    y = e.op("Mul", acc, mult)
    one = e.scalar(1.0, TensorProto.FLOAT)
    e.op("QuantizeLinear", y, one, zy, out=out(n, 0))


def matmul_integer_to_float(e: Emitter):
    """com.microsoft MatMulIntegerToFloat(A, B, a_scale, b_scale, a_zp, b_zp, bias) =
    float(MatMulInteger(A, B, a_zp, b_zp)) · (a_scale · b_scale) + bias."""
    n = e.node
    a, b, sa, sb, za, zb, bias = (inp(n, k) for k in range(7))
    dt = e.need_float(sa)
    if dt != TensorProto.FLOAT:
        raise Refused("scales other than float32 do not expand")
    _matmul_scaled(e, a, b, za, zb, sa, sb, bias)


def _matmul_scaled(e, a, b, za, zb, sa, sb, bias):
    n = e.node
    _per_tensor(e, sa)
    acc = _int_product(e, a, b, za, zb)
    scale = e.op("Mul", sa, _column_scale(e, sb))
    e.op("Mul", acc, scale, out=None if bias else out(n, 0))
    if bias:
        e.op("Add", e.nodes[-1].output[0], bias, out=out(n, 0))


def dynamic_quantize_matmul(e: Emitter):
    """com.microsoft DynamicQuantizeMatMul(A, B, b_scale, b_zp, bias): A quantized as DynamicQuantizeLinear does
    (uint8), then MatMulIntegerToFloat."""
    n = e.node
    a, b, sb, zb, bias = (inp(n, k) for k in range(5))
    if e.facts.dtype.get(sb) != TensorProto.FLOAT:
        raise Refused("scales other than float32 do not expand")
    sa, za = _dynamic_params(e, a)
    _matmul_scaled(e, e.op("QuantizeLinear", a, sa, za), b, za, zb, sa, sb, bias)


# ---- redundant fake quantization ---------------------------------------------------------------------------
_VALUE_VIEWS = {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity"}


def _same_param(a, b, consts) -> bool:
    """Two scale (or zero point) inputs that hold the same value: one tensor, or equal constants of one type."""
    if a == b:
        return True
    va, vb = consts.get(a), consts.get(b)
    return va is not None and vb is not None and va.dtype == vb.dtype and va.size == vb.size == 1 and \
        np.array_equal(va.reshape(-1), vb.reshape(-1))


def _params(node):
    return [node.input[k] if len(node.input) > k else "" for k in (1, 2)]


def redundant_fake_quant(model):
    """Drop each QuantizeLinear -> DequantizeLinear pair that re-quantizes values already on its grid: the
    QuantizeLinear reads, through value-preserving views only (Reshape, Transpose, Squeeze, Unsqueeze, Flatten,
    Identity), the output of a DequantizeLinear with the same per-tensor scale and zero point (ORT's quantizer
    writes such pairs after every Reshape and Transpose). q = rint(s (k - z) / s) + z gives back k exactly for the
    8- and 16-bit ranges (the product's relative error 2^-24 stays far below half a step), and float8 codes come
    back likewise, so each DequantizeLinear of the pair returns its input bit for bit: the pair is an identity.

        x8 -> DQ(s, z) -> Transpose -> Q(s, z) -> DQ(s, z) -> MatMul   becomes   x8 -> DQ(s, z) -> Transpose -> MatMul

    Returns (model, number of pairs dropped); the model is a copy when anything changed."""
    from onnx import numpy_helper
    graph = model.graph
    consts = {t.name: numpy_helper.to_array(t) for t in graph.initializer if int(np.prod(t.dims)) <= 1}
    for n in graph.node:
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            for a in n.attribute:
                if a.name == "value" and int(np.prod(a.t.dims)) <= 1:
                    consts[n.output[0]] = numpy_helper.to_array(a.t)
    producer = {o: n for n in graph.node for o in n.output if o}
    readers: dict = {}
    for n in graph.node:
        for t in n.input:
            if t:
                readers.setdefault(t, []).append(n)
    outputs = {o.name for o in graph.output}
    std = ("", "ai.onnx")
    drop, rename = set(), {}
    for q in graph.node:
        if q.op_type != "QuantizeLinear" or q.domain not in std or attr(q, "block_size", 0):
            continue
        s, z = _params(q)
        if consts.get(s) is None or consts[s].size != 1 or (z and consts.get(z) is None):
            continue
        t, src = q.input[0], None
        while t in producer:
            p = producer[t]
            if p.domain in std and p.op_type in _VALUE_VIEWS:
                t = p.input[0]
                continue
            if p.domain in std and p.op_type == "DequantizeLinear":
                src = p
            break
        if src is None:
            continue
        s1, z1 = _params(src)
        if not _same_param(s, s1, consts) or bool(z) != bool(z1) or (z and not _same_param(z, z1, consts)):
            continue
        dqs = readers.get(q.output[0], [])
        if not dqs or q.output[0] in outputs or any(
                d.op_type != "DequantizeLinear" or d.domain not in std or d.output[0] in outputs
                or not _same_param(_params(d)[0], s, consts) or bool(_params(d)[1]) != bool(z)
                or (z and not _same_param(_params(d)[1], z, consts)) or attr(d, "output_dtype", 0)
                for d in dqs):
            continue
        drop.add(id(q))
        for d in dqs:
            drop.add(id(d))
            rename[d.output[0]] = q.input[0]
    if not drop:
        return model, 0
    import onnx
    out = onnx.ModelProto()
    out.CopyFrom(model)
    gone = {k for k, n in enumerate(model.graph.node) if id(n) in drop}
    kept = [n for k, n in enumerate(out.graph.node) if k not in gone]
    for n in kept:
        for k, t in enumerate(n.input):
            while t in rename:
                t = rename[t]
            n.input[k] = t
    del out.graph.node[:]
    out.graph.node.extend(kept)
    return out, sum(1 for n in model.graph.node if id(n) in drop and n.op_type == "QuantizeLinear")


# ---- quantized MatMuls as 8-bit GEMMs ----------------------------------------------------------------------
def _dq_parts(node):
    return node.input[0], node.input[1], (node.input[2] if len(node.input) > 2 and node.input[2] else None)


def _const(e: Emitter, t):
    return None if t is None else e.facts.const.get(t)


def quantized_weight(e: Emitter, dq):
    """(w_q, per-column scale as float32 [N] or scalar) of a DequantizeLinear of a constant 2-D int8/uint8 weight
    [K, N] with a per-tensor or per-column (axis 1) scale and a zero point of 0, else Refused."""
    w, s, z = _dq_parts(dq)
    wv, sv = _const(e, w), _const(e, s)
    if wv is None or sv is None or wv.ndim != 2 or wv.dtype not in (np.int8, np.uint8):
        raise Refused("B is not the DequantizeLinear of a constant 2-D int8/uint8 weight")
    if attr(dq, "block_size", 0) or attr(dq, "output_dtype", 0) or sv.dtype != np.float32:
        raise Refused("the weight's DequantizeLinear is blocked, or its scale is not float32")
    if sv.size != 1 and not (sv.ndim == 1 and attr(dq, "axis", 1) % 2 == 1 and sv.size == wv.shape[1]):
        raise Refused("the weight's scale is neither per tensor nor per output column")
    zv = _const(e, z)
    if z is not None and (zv is None or np.any(zv)):
        raise Refused("the weight has non-zero zero points (asymmetric weights are multiplied in float)")
    return w, wv, sv.reshape(-1) if sv.size != 1 else sv.reshape(())


def qdq_matmul(e: Emitter):
    """MatMul(DequantizeLinear(a8) [through views], DequantizeLinear(w8)) -- ORT's QDQ form of a quantized linear layer, a8 data with
    a per-tensor scale sa and zero point za, w8 a constant [K, N] weight with per-tensor or per-column scales sw and
    zero point 0 -- as the 8-bit GEMM and a float epilogue:

        y = Cast(MatMulInteger(a8, w8)) * (sa sw[n]) + c[n],   c[n] = -(sa sw[n]) za sum_k w8[k, n]

    The integer sums are exact (s32); the float epilogue rounds a few times where the original sums K rounded
    products (kernels/families/gemm/int8.py multiplies a8 and w8 on the tensor cores)."""
    n = e.node
    xa, xb = inp(n, 0), inp(n, 1)
    views = _views_to(e.facts.producer, xa)
    da, db = e.facts.producer.get(views[-1].input[0] if views else xa), e.facts.producer.get(xb)
    if da is None or db is None or da.op_type != "DequantizeLinear" or db.op_type != "DequantizeLinear":
        raise Refused("the operands are not both DequantizeLinear outputs")
    a, s, z = _dq_parts(da)
    if e.facts.dtype.get(a) not in (TensorProto.INT8, TensorProto.UINT8) or (e.facts.rank(xa) or 0) < 2:
        raise Refused("A is not an int8/uint8 matrix")
    sa, za = _const(e, s), _const(e, z)
    if sa is None or sa.size != 1 or sa.dtype != np.float32 or (z is not None and (za is None or za.size != 1)):
        raise Refused("A's scale and zero point are not per-tensor constants")
    w, wv, sw = quantized_weight(e, db)
    scale = (np.float32(sa.reshape(-1)[0]) * sw).astype(np.float32)
    for v in reversed(views):            # per-tensor DequantizeLinear commutes with views: view the integers
        a = e.op(v.op_type, a, *v.input[1:], **{x.name: helper.get_attribute_value(x) for x in v.attribute})
    acc = e.cast(e.op("MatMulInteger", a, w), TensorProto.FLOAT)
    zero = 0 if za is None else int(za.reshape(-1)[0])
    e.op("Mul", acc, e.const(scale), out=None if zero else out(n, 0))
    if zero:
        colsum = wv.astype(np.int64).sum(axis=0)
        corr = (-(scale.astype(np.float64) * zero * colsum)).astype(np.float32)
        e.op("Add", e.nodes[-1].output[0], e.const(corr), out=out(n, 0))


def matmul_integer_zero_point(e: Emitter):
    """MatMulInteger(a, w, za) with a constant weight w [K, N] (its zero point absent or 0) and any zero point za of
    A (DynamicQuantizeLinear's, computed per run): sum (a - za) w = MatMulInteger(a, w) - za sum_k w[k, n], exact
    in int32 (ONNX's modular s32 arithmetic both ways), so the 8-bit GEMM multiplies the stored integers."""
    n = e.node
    a, w, za, zw = (inp(n, k) for k in range(4))
    wv = _const(e, w)
    if za is None or wv is None or wv.ndim != 2:
        raise Refused("no A zero point, or B is not a constant matrix")
    zv = _const(e, zw)
    if zw is not None and (zv is None or np.any(zv)):
        raise Refused("B has non-zero zero points")
    if (e.facts.rank(za) or 0) > 1 or (e.facts.rank(za) == 1 and e.facts.dim(za, 0) != 1):
        raise Refused("A's zero point is per row")
    colsum = e.const(wv.astype(np.int64).sum(axis=0).astype(np.int32))
    corr = e.op("Mul", e.cast(za, TensorProto.INT32), colsum)
    e.op("Sub", e.op("MatMulInteger", a, w), corr, out=out(n, 0))


def _views_to(producer, t) -> list:
    """The value-preserving views (outermost first) between tensor `t` and the first node that is not one."""
    out = []
    while t in producer and producer[t].op_type in _VALUE_VIEWS and producer[t].domain in ("", "ai.onnx"):
        out.append(producer[t])
        t = producer[t].input[0]
    return out


UNREAD_AFTER_FOLD = _VALUE_VIEWS | {"DequantizeLinear"}


def folds_kind(node) -> bool:
    """Whether `node` is of an op type quant folds (MatMul, MatMulInteger in the default domain)."""
    return node.domain in ("", "ai.onnx") and node.op_type in ("MatMul", "MatMulInteger")


def folds(node, facts) -> bool:
    """Whether `node` is a standard op this module rewrites into the 8-bit GEMM's form (qdq_matmul,
    matmul_integer_zero_point), tried as an expansion (graph_rewrites/contrib/model.py)."""
    if node.domain not in ("", "ai.onnx"):
        return False
    if node.op_type == "MatMul":
        views = _views_to(facts.producer, node.input[0])
        ps = [facts.producer.get(views[-1].input[0] if views else node.input[0]), facts.producer.get(node.input[1])]
        return all(p is not None and p.op_type == "DequantizeLinear" for p in ps)
    return node.op_type == "MatMulInteger" and len(node.input) > 2 and bool(node.input[2])
