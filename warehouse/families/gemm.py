"""The gemm family's graph half: GEMM + any element-wise epilogue (bias, GELU erf/tanh, ReLU, SiLU, scale,
residual add), its roles, how its subgraphs join horizontal groups and take MatMulNBits weight decoders.

Element-wise ops merge into the N loop by Primitive 1, so one +Graph covers every epilogue chain.

A dynamically quantized activation (DynamicQuantizeLinear as graph_rewrites/contrib/quant.py expands it: the
dynamic_range kernel computes the scale and zero point) is quantized by the 8-bit GEMM as it loads A:

    x f32 -> QuantizeLinear(s, z) -> MatMulInteger(., w8) - z colsum(w8) -> Cast, * s sw, + bias [-> LayerNorm]

gemm_quantized_a (and gemm_rownorm's gemm_layernorm_quantized_a) are the plain bodies with prologue growth
allowed; their role finder accepts that one prologue and refuses every other.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from onnx import TensorProto

from ...graph_rewrites import ops
from ...graph_rewrites.family import Decodes, Family, Joins, Roles
from ...graph_rewrites.index import describe_node
from ..registry import pattern

DOTS = ops.with_role("dot")        # MatMul, Gemm, MatMulInteger (the 8-bit GEMM)


@dataclass(frozen=True)
class GemmOperands:
    """One GEMM node (a GraphView position) and its operands A and B, read from memory (subgraph inputs)."""
    gemm: int
    a: str
    b: str


@dataclass(frozen=True)
class GemmRoles(GemmOperands, Roles):
    """A GEMM subgraph: the GEMM, its operands, the epilogue's other inputs; `nbits`: B's MatMulNBits decoder
    description (graph_rewrites/contrib/decoders.py) when the kernel decodes B in its mainloop."""
    epilogue_inputs: tuple = ()
    nbits: dict | None = None


def gemm_roles(view, members):
    """The GEMM node, its operands A and B (read from memory: subgraph inputs) and the epilogue's
    other inputs."""
    dots = [p for p in members if view.nodes[p].op_type in DOTS]
    if len(dots) != 1:
        return f"a gemm subgraph has exactly one MatMul or Gemm (found {len(dots)})"
    node = view.nodes[dots[0]]
    inputs = view.graph_index.boundary(members)[0]
    a, b = node.input[0], node.input[1]
    for role, t in (("A", a), ("B", b)):
        if t not in inputs:
            return (f"{describe_node(node)}: operand {role} '{t}' is computed inside the subgraph; the gemm "
                    "template reads its operands from memory")
    return GemmRoles(dots[0], a, b, tuple(t for t in inputs if t not in (a, b)))


def _dtypes(view, roles) -> str:
    dts = {view.dtypes.get(roles.a), view.dtypes.get(roles.b)}
    return "/".join(sorted(TensorProto.DataType.Name(d) if d else "?" for d in dts))


def gemm_signature(view, roles: GemmRoles, batched: bool = False):
    """(N, (K, dtype, trans_b)) of a GEMM subgraph, or the reason it cannot join a group. `batched`: B may be a
    batched operand ([.., K, N]); its batch dims and N then join K in the class (one shape for all)."""
    node = view.nodes[roles.gemm]
    sb = view.shape(roles.b)
    if batched and sb is not None and len(sb) > 2 and node.op_type == "MatMul":
        sa = view.shape(roles.a) or []
        return str(sb[-1]), (f"{sb[-2]} (A {sa}, B {sb})", _dtypes(view, roles), False)
    if sb is None or len(sb) != 2:
        return f"B '{roles.b}' is not a 2-D weight (shape {sb})"
    tb = node.op_type == "Gemm" and bool(ops.attr(node, "transB", 0))
    if node.op_type == "Gemm" and ops.attr(node, "transA", 0):
        return "transA=1"
    n, k = (sb[0], sb[1]) if tb else (sb[1], sb[0])
    return str(n), (str(k), _dtypes(view, roles), tb)


def decoded_weights(view, roles: GemmRoles) -> list:
    """B, when a MatMul reads it (a MatMulNBits expansion's dequantised weight can be decoded in the mainloop)."""
    return [roles.b] if view.nodes[roles.gemm].op_type == "MatMul" else []


@dataclass(frozen=True)
class QuantizedARoles(GemmRoles):
    """A GEMM subgraph whose A operand is quantized in the kernel: `a` is the float32 activation read from memory,
    `quantize` the QuantizeLinear node (a GraphView position) between it and the MatMulInteger."""
    quantize: int = -1


def quantized_a_roles(view, members):
    """The MatMulInteger, its QuantizeLinear prologue on A and B, or why the subgraph is not that."""
    dots = [p for p in members if view.nodes[p].op_type in DOTS]
    if len(dots) != 1:
        return f"a gemm subgraph has exactly one MatMul or Gemm (found {len(dots)})"
    dot = view.nodes[dots[0]]
    if dot.op_type != "MatMulInteger" or any(len(dot.input) > k and dot.input[k] for k in (2, 3)):
        return f"{describe_node(dot)}: only a MatMulInteger without zero points quantizes its A in the kernel"
    qs = [p for p in members if view.nodes[p].output[0] == dot.input[0]]
    if len(qs) != 1 or view.nodes[qs[0]].op_type != "QuantizeLinear" or view.nodes[qs[0]].domain not in ("", "ai.onnx"):
        return f"{describe_node(dot)}: A is not a QuantizeLinear inside the subgraph"
    q = view.nodes[qs[0]]
    inputs = view.graph_index.boundary(members)[0]
    x, b = q.input[0], dot.input[1]
    if x not in inputs or b not in inputs:
        return f"{describe_node(q)}: the activation and the weight must be read from memory"
    if view.dtypes.get(x) != TensorProto.FLOAT or view.dtypes.get(q.output[0]) not in (TensorProto.UINT8,
                                                                                          TensorProto.INT8):
        return f"{describe_node(q)}: quantizes a float32 activation to uint8 or int8 only"
    for t in q.input[1:]:
        if t and (t not in inputs or view.shape(t) not in ([], [1])):
            return f"{describe_node(q)}: scale and zero point are per-tensor values from memory"
    gi = view.graph_index
    if any(p not in members for p in gi.consumers.get(q.output[0], ())) or q.output[0] in gi.graph_outputs:
        return f"{describe_node(q)}: its 8-bit output is also read outside the GEMM"
    anc = gi.ancestors[dots[0]]
    others = [p for p in members if p not in (dots[0], qs[0]) and anc >> p & 1]
    if others:
        return f"{describe_node(view.nodes[others[0]])}: the only prologue is A's QuantizeLinear"
    return QuantizedARoles(dots[0], x, b, tuple(t for t in inputs if t not in (x, b)), quantize=qs[0])


GEMM = Family(
    "gemm", "MatMul/Gemm with an element-wise epilogue", roles=GemmRoles, find_roles=gemm_roles,
    joins=Joins(operand=lambda r: r.a, signature=gemm_signature, anchor=lambda r: r.gemm,
                describe=lambda c: f"K={c[0]}, dtype {c[1]}, trans_b {c[2]}", what="K, dtype and B layout"),
    decodes=Decodes(weights=decoded_weights, decoded=lambda r, metas: replace(r, nbits=metas[0])))


@pattern("gemm", family=GEMM)
def gemm(b):
    """Row-major activations [M, K] times weights [K, N]."""
    return b.MatMul(b.input("x", ["M", "K"]), b.input("w", ["K", "N"]))


@pattern("batched_gemm", family=GEMM)
def batched_gemm(b):
    """Both operands batched [B, M, K] x [B, K, N]."""
    return b.MatMul(b.input("x", ["B", "M", "K"]), b.input("w", ["B", "K", "N"]))


@pattern("gemm_quantized_a", allow_prologue=True, family=GEMM, roles=quantized_a_roles)
def gemm_quantized_a(b):
    """Row-major activations [M, K] quantized in the kernel, times 8-bit weights [K, N]."""
    return b.MatMul(b.input("x", ["M", "K"]), b.input("w", ["K", "N"]))
