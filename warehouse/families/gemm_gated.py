"""The gemm_gated family's graph half. Gated MLPs: act(x·Wg) * (x·Wu) (SwiGLU in Llama, Qwen2, Phi-3; GeGLU with GELU) as one GEMM kernel whose
two products share the A tiles (kernels/CONTRACT.md §2.1, PLUS_GATED) and whose epilogue gets both sums.

Two forms, one family:
* separate gate and up projections: two sibling GEMMs reading one A; their epilogues meet. Not grown from a
  seed: the horizontal step merges the two subgraphs of the gemm family growth found (the gate's activation
  chain and the product with the up projection's result in one of them: `meeting`) when the union passes
  `gated_roles`, before the plain horizontal groups are tried;
* one combined projection [K, 2N] split into its halves by two Slices (TorchScript) or a Split (dynamo), as
  in Phi-3: grown from the MatMul like any GEMM epilogue, matched by the two vertical patterns below.
The +Graph decides the loop structure; `gated_roles` decides the rest (two products of one A, halves of one
weight, every chain element-wise until the products meet) and refuses anything else with a reason.
MatMulNBits weights (int2/4/8): the separate form only, both weights quantised with one layout; the kernel decodes
both in its mainloop (the decoder post-pass moves both decoder chains in: `Decodes`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from onnx import TensorProto, helper

from ...graph_rewrites import ops
from ...graph_rewrites.contrib import decoders
from ...graph_rewrites.family import Decodes, Family, Groups, Roles
from ...graph_rewrites.index import describe_node
from ..registry import pattern
from ..roles import descendants
from .gemm import GEMM, GemmOperands


@dataclass(frozen=True)
class CombinedProjection(GemmOperands):
    """One GEMM whose weight [K, 2N] holds both projections: `half` = N columns each; `starts`: the first
    column of each part (None: computed from the shape, the renderer evaluates it)."""
    half: int = 0
    starts: tuple = ()


@dataclass(frozen=True)
class GatedRoles(Roles):
    """A gated MLP: the shared A, the two product tensors (`parts`, bound to the template's two sums: gate,
    then up), `meet` (the first tensor computed from both); either `members` (separate gate and up GEMMs)
    or `combined` (one projection split in halves); `nbits`: both weights' MatMulNBits decoder descriptions
    (gate's, up's) when the kernel decodes them."""
    a: str
    parts: tuple
    meet: str = ""
    members: tuple = ()
    combined: CombinedProjection | None = None
    nbits: tuple | None = None

    @property
    def pair(self) -> bool:
        """Separate gate and up projections (two GEMMs), not one combined projection."""
        return bool(self.members)

_PASS = {"Cast", "CastLike"} | ops.with_role("alias") | {"Transpose"}
_INT_MAX = 2 ** 62


def _elementwise(node) -> bool:
    o = ops.get(node.op_type, node.domain)
    return o is not None and (o.kind == "elementwise" or node.op_type in _PASS)


def _halves(view, ms, node, c):
    """{output tensor: first column} of the Slice/Split `node` reading the GEMM result `c` along its last
    axis, or the reason it does not split it into column ranges the template can bind."""
    shape = view.shape(c) or []
    rank, last = len(shape), (shape[-1] if shape else None)
    if not isinstance(last, int):
        return f"{describe_node(node)}: the combined projection's width {last} is not static"
    if node.op_type == "Split":
        ax = ops.attr(node, "axis", 0)
        if ax not in (-1, rank - 1):
            return f"{describe_node(node)} splits axis {ax}, not the projection's columns"
        out, start = {}, 0
        for t in node.output:
            w = (view.shape(t) or [None])[-1]
            if not isinstance(w, int):
                return f"{describe_node(node)}: part width {w} is not static"
            if t:
                out[t] = (start, w)
            start += w
        return out
    starts, ends, axes, steps = (view.const(node.input[k]) if len(node.input) > k and node.input[k] else None
                                 for k in (1, 2, 3, 4))
    if (len(node.input) > 3 and node.input[3] and axes is None) or (len(node.input) > 4 and node.input[4] and steps is None):
        return f"{describe_node(node)}: axes or steps that are not constants"
    if starts is None or ends is None:      # bounds computed from the shape (TorchScript's chunk): the
        w = (view.shape(node.output[0]) or [None])[-1]      # renderer reads their values (start None here)
        ax = [int(x) for x in axes.reshape(-1)] if axes is not None else [rank - 1]
        st = [int(x) for x in steps.reshape(-1)] if steps is not None else [1]
        if len(ax) != 1 or ax[0] not in (-1, rank - 1) or st != [1] or not isinstance(w, int):
            return f"{describe_node(node)} is not a slice of the projection's columns with step 1"
        return {node.output[0]: (None, w)}
    starts, ends = [int(x) for x in starts.reshape(-1)], [int(x) for x in ends.reshape(-1)]
    axes = [int(x) for x in axes.reshape(-1)] if axes is not None else list(range(len(starts)))
    steps = [int(x) for x in steps.reshape(-1)] if steps is not None else [1] * len(starts)
    if len(starts) != 1 or axes[0] not in (-1, rank - 1) or steps[0] != 1:
        return f"{describe_node(node)} is not a slice of the projection's columns with step 1"
    s, e = starts[0], ends[0]
    s = max(0, s + last) if s < 0 else min(s, last)
    e = last if e >= _INT_MAX else (max(0, e + last) if e < 0 else min(e, last))
    return {node.output[0]: (s, e - s)}


def _combined_parts(view, ms, dot):
    """(first half, second half) tensors of a combined projection, or a reason."""
    c = view.nodes[dot].output[0]
    shape_only = ops.with_role("shape")          # Shape/Size read only its dims (TorchScript's chunk bounds)
    users = [p for p in sorted(ms) if c in view.graph_index.reads[p] and view.nodes[p].op_type not in shape_only]
    if c in view.outputs or any(p not in ms and view.nodes[p].op_type not in shape_only
                                for p in view.graph_index.users(dot)):
        return f"{describe_node(view.nodes[dot])}: the combined projection is also read outside the subgraph"
    ranges = {}
    for p in users:
        node = view.nodes[p]
        if node.op_type not in ("Slice", "Split"):
            return f"{describe_node(node)} reads the combined projection; only the Slices/Split of its halves may"
        got = _halves(view, ms, node, c)
        if isinstance(got, str):
            return got
        ranges.update(got)
    width = (view.shape(c) or [None])[-1]
    half = width // 2 if isinstance(width, int) and width % 2 == 0 else None
    parts = list(ranges)
    if half is None or len(parts) != 2 or any(w != half for _, w in ranges.values()) \
            or {s for s, _ in ranges.values() if s is not None} - {0, half} \
            or len({s for s, _ in ranges.values()} - {None}) != len([1 for s, _ in ranges.values() if s is not None]):
        return (f"{describe_node(view.nodes[dot])}: its result is not split into exactly its two halves "
                f"(parts {sorted(ranges.values(), key=str)} of {width} columns)")
    if ranges[parts[1]][0] == 0 or ranges[parts[0]][0] == half:
        parts.reverse()
    # the first column of each part: None where the bounds are computed from the shape (the renderer
    # evaluates them and refuses anything but the two halves)
    return parts[0], parts[1], half, [ranges[parts[0]][0], ranges[parts[1]][0]]


def gated_roles(view, members):
    """A gated MLP: the shared A and, per product, its GEMM and B (two GEMMs), or the combined GEMM, its B and
    the width of one half (one GEMM); `parts` are the two product tensors the template binds to its two sums,
    `meet` the first tensor computed from both (the gating product)."""
    ms = set(members)
    dots = [p for p in members if view.nodes[p].op_type in ("MatMul", "Gemm")]
    inputs = view.graph_index.boundary(members)[0]
    for d in dots:
        node = view.nodes[d]
        if node.op_type == "Gemm" and (ops.attr(node, "transA", 0) or len(node.input) > 2 and node.input[2]):
            return f"{describe_node(node)}: a Gemm with transA or C is not a gated product"
        if decoders.decoder_of(view, node.input[1]) is not None and (node.op_type != "MatMul" or len(dots) != 2):
            return (f"{describe_node(node)}: its weight is a MatMulNBits decoder's output, which the gated template "
                    "decodes for two separate MatMul projections only (not a combined one)")
        for role, t in (("A", node.input[0]), ("B", node.input[1])):
            if t not in inputs:
                return (f"{describe_node(node)}: operand {role} '{t}' is computed inside the subgraph; the gemm "
                        "template reads its operands from memory")
    if len(dots) == 2:
        a = {view.nodes[d].input[0] for d in dots}
        if len(a) != 1:
            return f"the two GEMMs read different A tensors ({sorted(a)})"
        for d in dots:
            if any(q != d and q in descendants(view, ms, d) for q in dots):
                return f"{describe_node(view.nodes[d])} feeds the other GEMM; a gated MLP's GEMMs are siblings"
        shapes = {tuple(view.shape(view.nodes[d].input[1]) or ()) for d in dots}
        if len(shapes) != 1 or len(next(iter(shapes))) != 2:
            return f"the two weights differ in shape or are not 2-D ({sorted(shapes)})"
        why = decoders.decoders_of(view, [view.nodes[d].input[1] for d in dots])   # MatMulNBits: both decoded
        if isinstance(why, str):                                                   # in the mainloop, or neither
            return why
        roles = GatedRoles(a.pop(), tuple(view.nodes[d].output[0] for d in dots), members=tuple(
            GemmOperands(d, view.nodes[d].input[0], view.nodes[d].input[1]) for d in dots))
    elif len(dots) == 1:
        got = _combined_parts(view, ms, dots[0])
        if isinstance(got, str):
            return got
        node = view.nodes[dots[0]]
        if len(view.shape(node.input[1]) or ()) != 2:
            return f"{describe_node(node)}: the combined weight is not 2-D"
        roles = GatedRoles(node.input[0], tuple(got[:2]), combined=CombinedProjection(
            dots[0], node.input[0], node.input[1], got[2], tuple(got[3])))
    else:
        return f"a gated MLP has one combined or two separate GEMMs (found {len(dots)})"
    meet = _meet(view, ms, roles.parts)
    return meet if isinstance(meet, str) else replace(roles, meet=view.nodes[meet].output[0])


def _meet(view, ms, parts):
    """The node where the two products meet, or the reason they do not as a gated MLP: every node reading a
    product's chain before it is element-wise and reads the other product's values only through the meet."""
    derived = [{parts[0]}, {parts[1]}]
    on = [set(), set()]
    for p in sorted(ms):
        reads = view.graph_index.reads[p]
        for k in (0, 1):
            if any(t in derived[k] for t in reads):
                on[k].add(p)
                derived[k].update(t for t in view.nodes[p].output if t)
    both = on[0] & on[1]
    if not both:
        return "the two products never meet (no node computes from both): not a gated MLP"
    meet = min(both)
    desc = view.graph_index.descendants[meet]
    if any(p != meet and not desc >> p & 1 for p in both):
        return "the two products meet in more than one place"
    for p in sorted(on[0] | on[1]):
        node = view.nodes[p]
        if not _elementwise(node):
            return (f"{describe_node(node)}: {node.op_type} on a gated product; the epilogue takes element-wise "
                    "ops, casts and reshapes/transposes of the result")
    return meet


def meeting(view, subgraphs, ks) -> list:
    """The subgraphs of `ks` that read a result of another one of `ks` or are read by one: a gated MLP's
    products meet, so only such siblings may form its group."""
    outs = {k: set(subgraphs[k].outputs) for k in ks}
    reads = {k: {t for p in subgraphs[k].nodes for t in view.graph_index.reads[p]} for k in ks}
    return [k for k in ks if any(j != k and (outs[j] & reads[k] or outs[k] & reads[j]) for j in ks)]


GEMM_GATED = Family(
    "gemm_gated", "a gated MLP's two products of one A in one GEMM, the epilogue gets both sums",
    roles=GatedRoles, find_roles=gated_roles, groups=Groups(member=GEMM, candidates=meeting),
    decodes=Decodes(weights=lambda view, r: [m.b for m in r.members],
                    decoded=lambda r, metas: replace(r, nbits=tuple(metas))))


@pattern("gemm_gated", family=GEMM_GATED, horizontal=True, before=GEMM)
def gemm_gated(b):
    """Gate and up projections of one input [M, K], each [K, N]; their epilogues meet (act(g) * u)."""
    x = b.input("x", ["M", "K"])
    return [b.MatMul(x, b.input("wg", ["K", "N"])), b.MatMul(x, b.input("wu", ["K", "N"]))]


@pattern("gemm_gated_slice", family=GEMM_GATED, before=GEMM)
def gemm_gated_slice(b):
    """One combined projection [K, 2N] sliced into its halves (TorchScript), act(first) * second."""
    y = b.MatMul(b.input("x", ["M", "K"]), b.input("w", ["K", "N2"]))
    lo, hi, end = (b.input(n, [1], TensorProto.INT64) for n in ("lo", "hi", "end"))
    g = b.Slice(y, lo, hi, b.const([-1]))
    u = b.Slice(y, hi, end, b.const([-1]))
    return b.Mul(b.Mul(g, b.Sigmoid(g)), u)


@pattern("gemm_gated_split", family=GEMM_GATED, before=GEMM)
def gemm_gated_split(b):
    """One combined projection [K, 2N] split into its halves (dynamo), act(first) * second."""
    y = b.MatMul(b.input("x", ["M", "K"]), b.input("w", ["K", "N2"]))
    g, u = f"t{len(b.nodes)}_0", f"t{len(b.nodes)}_1"
    b.nodes.append(helper.make_node("Split", [y], [g, u], axis=-1, num_outputs=2))
    return b.Mul(b.Mul(g, b.Sigmoid(g)), u)
