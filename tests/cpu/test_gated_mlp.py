"""Gated MLPs at identification and rendering (warehouse/families/gemm_gated.py, render_gemm_gated): separate
gate/up projections merge in the horizontal step (either order, SwiGLU or GeGLU), one combined projection split
by Slices (halves in either order) or a Split grows into one subgraph; the rendered epilogue applies the
activation to the gate half whatever the graph's order; what is not a gated MLP is left to the other patterns
with the role finder's reason; rewritten models run their function bodies on ORT CPU unchanged."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto

import plus_ep
from plus_ep.kernels.render import render
from plus_ep.kernels.target import Target
from tests.support import gated_models as M
from tests.support.graphs import Graph


def _same_on_ort(model, r):
    x = np.random.default_rng(3).standard_normal((2, 5, M.H)).astype(np.float32)
    run = lambda m: ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x})  # noqa: E731
    for a, b in zip(run(r.model), run(model)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def _epilogue(r, arch="sm_80"):
    (sg,) = r.subgraphs
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    src = render(r.view, sg, ins, outs, Target(arch, "exact"), node_name="g").variants[0].source
    return src[src.index("PLUS_DEV void plus_epilogue_gated"):src.index('#include "gemm')]


@pytest.mark.parametrize("act,up_first", [("silu", False), ("gelu", True)])
def test_separate_projections_are_one_gated_subgraph(act, up_first):
    model = M.gated_pair_model(act=act, up_first=up_first)
    r = plus_ep.rewrite_detailed(model)
    assert [s.pattern.name for s in r.subgraphs] == ["gemm_gated"]
    (sg,) = r.subgraphs
    assert sg.roles.pair and sg.roles.meet == "t" + str(
        next(k for k, n in enumerate(model.graph.node) if n.name == "gated/Mul"))
    assert [r.view.nodes[m.gemm].name for m in sg.roles.members] == (
        ["up/MatMul", "gate/MatMul"] if up_first else ["gate/MatMul", "up/MatMul"])
    assert [e["status"] for e in r.identifier.groups] == ["grouped"]
    _same_on_ort(model, r)


@pytest.mark.parametrize("form,swap", [("slice", False), ("slice", True), ("split", False)])
def test_combined_projection_binds_the_first_half_to_the_gate(form, swap):
    model = M.gated_combined_model(form=form, swap=swap)
    r = plus_ep.rewrite_detailed(model)
    assert [s.pattern.name for s in r.subgraphs] in (["gemm_gated_slice"], ["gemm_gated_split"])
    (sg,) = r.subgraphs
    assert not sg.roles.pair and sg.roles.combined.half == M.INTER
    epi = _epilogue(r)
    # silu on acc0 (the first half, columns 0..I-1), multiplied by acc1 (B1 = B0 + I columns)
    assert "expf(-acc0)" in epi and "acc1" in epi and "expf(-acc1)" not in epi, epi
    _same_on_ort(model, r)


def test_combined_hooks_point_b1_at_the_second_half():
    r = plus_ep.rewrite_detailed(M.gated_combined_model(form="split"))
    (sg,) = r.subgraphs
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    rd = render(r.view, sg, ins, outs, Target("sm_80", "tf32"), node_name="g")
    src = rd.variants[0].source
    assert "#define PLUS_GATED 1" in src
    assert f"return (const plus_ab_t*)args.in[1] + 0 + {M.INTER}LL;" in src
    assert f"PLUS_DEV long long plus_ldb(const PlusArgs& args) {{ return {2 * M.INTER}LL; }}" in src
    # grid x: the logical width 16 * cdiv(I, 8) of the interleaved products
    grids = [ln.grid[0] for rt in rd.plan.routes for ln in rt.launches]
    assert grids and all(g.startswith(f"{M.INTER},8,cdiv,16,*,") for g in grids), grids


def test_siblings_that_never_meet_are_a_plain_group():
    g = Graph("siblings")
    x = g.input("X", ["batch", "seq", M.H])
    rng = np.random.default_rng(0)
    for name in ("a", "b"):
        g.op("MatMul", x, g.init(f"W{name}", rng.standard_normal((M.H, 16)).astype(np.float32)), out=name.upper())
        g.output(name.upper(), ["batch", "seq", 16])
    r = plus_ep.rewrite_detailed(g.model())
    assert [s.pattern.name for s in r.subgraphs] == ["gemm_group"]
    assert not any(e["pattern"] == "gemm_gated" for e in r.identifier.groups)


def test_a_reduction_on_the_gate_chain_is_refused_with_its_reason():
    """act(g) is normalised over its row before the gating: not element-wise, so no gated kernel."""
    g = Graph("gate_reduce")
    x = g.input("X", ["batch", "seq", M.H])
    rng = np.random.default_rng(0)
    gate = g.op("MatMul", x, g.init("Wg", rng.standard_normal((M.H, 16)).astype(np.float32)))
    up = g.op("MatMul", x, g.init("Wu", rng.standard_normal((M.H, 16)).astype(np.float32)))
    s = g.op("ReduceSum", gate, g.init("axes", np.array([-1], np.int64)), keepdims=1)
    g.op("Mul", g.op("Div", gate, s), up, out="Y")
    g.output("Y", ["batch", "seq", 16])
    r = plus_ep.rewrite_detailed(g.model())
    assert "gemm_gated" not in [s.pattern.name for s in r.subgraphs]


def test_combined_projection_with_three_parts_is_not_gated():
    """Phi-3's QKV projection: three Slices of one GEMM result are not two halves."""
    g = Graph("three_parts", opset=18)
    x = g.input("X", ["batch", "seq", M.H])
    y = g.op("MatMul", x, g.init("W", np.random.default_rng(0).standard_normal((M.H, 48)).astype(np.float32)))
    q, k, v = g.op("Split", y, outs=["q", "k", "v"], axis=-1, num_outputs=3)
    g.op("Mul", g.op("Mul", q, g.op("Sigmoid", q)), g.op("Add", k, v), out="Y")
    g.output("Y", ["batch", "seq", 16])
    from plus_ep.warehouse import default_warehouse
    from plus_ep.warehouse.families.gemm_gated import gated_roles
    r = plus_ep.rewrite_detailed(g.model())
    assert not any(s.pattern.name.startswith("gemm_gated") for s in r.subgraphs)
    view = r.view
    members = [i for i, n in enumerate(view.nodes) if n.op_type in ("MatMul", "Split", "Sigmoid", "Mul", "Add")]
    why = gated_roles(view, members)
    assert isinstance(why, str) and "not split into exactly its two halves" in why, why
    assert default_warehouse().get("gemm_gated_split").family.name == "gemm_gated"


def test_f16_pair_renders_for_wgmma():
    r = plus_ep.rewrite_detailed(M.gated_pair_model(TensorProto.FLOAT16))
    epi = _epilogue(r, "sm_90a")
    assert "acc0" in epi and "acc1" in epi


def _chunk_hook(src, fn):
    """The body of the decoding hook `fn` (plus_b_chunk / plus_b1_chunk) in a rendered source."""
    start = src.index(f"PLUS_DEV void {fn}(")
    return src[start:src.index("\n}\n", start)]


def test_int4_pair_decodes_each_weight_with_its_own_fields():
    """MatMulNBits gate and up weights (asymmetric gate, symmetric up): one gated subgraph holding both decoder
    chains; B0's hook reads the gate's packed weights, scales and zero points, B1's the up projection's own (a
    hook reading the other weight's fields fails here; the interpreter run is in
    tests/emulated/test_contrib_kernels.py)."""
    r = plus_ep.rewrite_detailed(M.gated_nbits_model(TensorProto.FLOAT16))
    (sg,) = r.subgraphs
    assert sg.pattern.name == "gemm_gated"
    assert [nb["packed"] for nb in sg.roles.nbits] == ["gate_Q", "up_Q"]
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    assert {"gate_Q", "gate_scales", "gate_zp", "up_Q", "up_scales"} <= set(ins)
    src = render(r.view, sg, ins, outs, Target("sm_80", "exact"), node_name="g").variants[0].source
    assert "#define PLUS_GATED 1" in src and "#define PLUS_B_NBITS 1" in src and '#include "gemm.cuh"' in src
    gate, up = _chunk_hook(src, "plus_b_chunk"), _chunk_hook(src, "plus_b1_chunk")
    at = {t: f"args.in[{ins.index(t)}]" for t in ("gate_Q", "gate_scales", "gate_zp", "up_Q", "up_scales")}
    assert at["gate_Q"] in gate and at["gate_scales"] in gate and at["gate_zp"] in gate
    assert at["up_Q"] in up and at["up_scales"] in up and "8.0f" in up            # symmetric: zero point 2^(4-1)
    assert not any(at[t] in up for t in ("gate_Q", "gate_scales", "gate_zp"))
    assert not any(at[t] in gate for t in ("up_Q", "up_scales"))


@pytest.mark.parametrize("kw,why", [(dict(up_block=32), "differ in layout"), (dict(plain_up=True), "only one weight")],
                         ids=["block-sizes-differ", "one-quantised"])
def test_int4_pair_of_other_layouts_stays_two_decoding_gemms(kw, why):
    """Gate and up weights quantised with different block sizes, or only one of them quantised: no gated kernel
    (the refusal names why); each MatMulNBits GEMM still decodes its weight in its own mainloop."""
    r = plus_ep.rewrite_detailed(M.gated_nbits_model(TensorProto.FLOAT16, k=64, **kw))
    assert "gemm_gated" not in [s.pattern.name for s in r.subgraphs]
    reasons = [e["reason"] for e in r.identifier.groups if e["pattern"] == "gemm_gated"]
    assert any(why in (x or "") for x in reasons), reasons
    decoded = [s.roles.nbits["packed"] for s in r.subgraphs if getattr(s.roles, "nbits", None)]
    assert decoded == (["gate_Q"] if kw.get("plain_up") else ["gate_Q", "up_Q"])


def test_gated_renderer_refuses_two_layouts():
    from plus_ep.kernels.codegen.pull import RenderError
    from plus_ep.kernels.families.gemm.nbits import check_pair
    nb = {"K": 64, "N": 32, "bits": 4, "block_size": 32, "packed": "q", "scales": "s", "zero_points": None}
    check_pair([nb, dict(nb, packed="q1", scales="s1", zero_points="z1")], "g")      # own fields: fine
    with pytest.raises(RenderError, match="differ in layout"):
        check_pair([nb, dict(nb, bits=8)], "g")
    with pytest.raises(RenderError, match="decodes both or neither"):
        check_pair([nb, None], "g")
