"""Contrib ops as ops (graph_rewrites/contrib): every expansion computes what ONNX Runtime's CPU kernel for
the op computes, on random inputs (tests/support/contrib_cases.py: fp32 and fp16, padded batches, odd
lengths, non-trivial weights), run both by ORT CPU (the expansion as a standard-op model) and by
onnx.reference (how the +Graph interpreter runs a contrib node); nodes that do not expand say why."""
from __future__ import annotations

import onnx
import pytest
from onnx import helper

from plus_ep.graph_rewrites import contrib
from plus_ep.graph_rewrites.contrib import Refused
from plus_ep.graph_rewrites.contrib.model import expansion_model
from tests.support import contrib_cases as cc

CASES = cc.all_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_expansion_matches_ort_kernel(case):
    ref = cc.reference(case)
    assert ref, case.name
    by_ort = cc.run_ort(expansion_model(case.node, case.feeds, case.opset), case.feeds)
    by_reference = contrib.run_node(case.node, case.feeds, case.opset)
    for name, want in ref.items():
        sel = case.compare.get(name, lambda y: y)
        for how, got in (("ORT CPU", by_ort), ("onnx.reference", by_reference)):
            assert got[name].shape == want.shape and got[name].dtype == want.dtype, (how, name)
            err = cc.rel_err(sel(got[name]), sel(want))
            assert err <= case.tol, f"{case.name} output {name} by {how}: error {err:.2e} > {case.tol:.0e}"


def test_every_listed_op_has_a_case():
    """The op list of issue 28 is covered: each op is expanded and compared above."""
    listed = {"Attention", "MultiHeadAttention", "SkipLayerNormalization", "SkipSimplifiedLayerNormalization",
              "SimplifiedLayerNormalization", "EmbedLayerNormalization", "BiasGelu", "FastGelu", "Gelu", "QuickGelu",
              "BiasAdd", "RotaryEmbedding", "GroupQueryAttention", "MatMulNBits"}
    assert listed <= {name for _, name in contrib.CONTRIB}
    assert listed <= {c.node.op_type for c in CASES}


def test_the_check_catches_a_wrong_expansion(monkeypatch):
    """The comparison is not vacuous: FastGelu expanded as the erf GELU (a plausible slip) fails it."""
    from plus_ep.graph_rewrites.contrib import activations
    case = next(c for c in CASES if c.name == "FastGelu_float32_o17")
    monkeypatch.setattr(activations, "gelu_tanh", activations.gelu_erf)
    got = contrib.run_node(case.node, case.feeds, case.opset)["y"]
    assert cc.rel_err(got, cc.reference(case)["y"]) > 10 * case.tol


_REFUSED = [
    ("Attention", ["x", "w", "b", "", "past"], ["y", "present"], dict(num_heads=2), "past state"),
    ("Attention", ["x", "w", "b"], ["y"], dict(num_heads=2, do_rotary=1), "do_rotary"),
    ("MultiHeadAttention", ["qkv"], ["y"], dict(num_heads=2), "packed"),
    ("GroupQueryAttention", ["q", "k", "v", "", "", "sl", "tot", "", "", "pos"], ["y"],
     dict(num_heads=2, kv_num_heads=1), "position_ids"),
    ("GroupQueryAttention", ["q", "k", "v", "", "", "sl", "tot"], ["y"],
     dict(num_heads=2, kv_num_heads=1, smooth_softmax=1), "smooth_softmax"),
    ("SkipLayerNormalization", ["x", "s", "g"], ["y", "mean"], {}, "mean"),
    ("MatMulNBits", ["a", "b", "s", "", "gidx"], ["y"], dict(K=32, N=8, bits=4, block_size=32), "g_idx"),
    ("RotaryEmbedding", ["x", "p", "c", "s"], ["y"], dict(is_packed_batching=1), "is_packed_batching"),
]


@pytest.mark.parametrize("op,ins,outs,attrs,why", _REFUSED, ids=[f"{r[0]}-{r[4]}" for r in _REFUSED])
def test_unsupported_forms_stay_opaque_with_a_reason(op, ins, outs, attrs, why):
    node = helper.make_node(op, ins, outs, domain=cc.MS, name="n", **attrs)
    facts = contrib.Facts(dtype={t: onnx.TensorProto.FLOAT for t in ins if t},
                          shape={t: [2, 3, 8] for t in ins if t}, opset=17)
    with pytest.raises(Refused, match=why):
        contrib.expand_node(node, facts)


def test_expand_model_and_restore_round_trip():
    """expand_model replaces what expands (same outputs, fresh internal names) and lists what does not;
    restore with nothing fused puts every contrib node back and drops the expansion's initializers."""
    case = next(c for c in CASES if c.name == "Attention_mask_index_float32")
    model = cc.single_node_model(case)
    bad = helper.make_node("GroupQueryAttention", ["x", "", "", "", "", "mask1d", "mask1d"], ["z"], domain=cc.MS,
                           name="gqa", num_heads=4, kv_num_heads=4, smooth_softmax=1)
    model.graph.node.append(bad)
    model.graph.output.append(onnx.ValueInfoProto(name="z"))
    ex = contrib.expand_model(model)
    assert [g.node.name for g in ex.groups] == ["Attention_0"]
    assert list(ex.refused) == ["GroupQueryAttention node 'gqa'"] and "smooth_softmax" in ex.refused[
        "GroupQueryAttention node 'gqa'"]
    ops_ = [n.op_type for n in ex.model.graph.node]
    assert "Attention" not in ops_ and ops_.count("MatMul") == 5 and "Softmax" in ops_
    assert all("/plus_ep/" in n.name for n in ex.model.graph.node if n.op_type != "GroupQueryAttention")
    back = contrib.restore(ex.model, ex)
    assert [n.op_type for n in back.graph.node] == ["Attention", "GroupQueryAttention"]
    assert sorted(t.name for t in back.graph.initializer) == ["b", "w"]
    del back.graph.node[1]                      # the refused node: ORT would reject smooth_softmax on fp32
    del back.graph.output[1]
    del ex.model.graph.node[-1]
    del ex.model.graph.output[1]
    feeds = {k: v for k, v in case.feeds.items() if k in ("x", "mask1d")}
    expanded, restored = cc.run_ort(ex.model, feeds)["y"], cc.run_ort(back, feeds)["y"]
    assert cc.rel_err(expanded, restored) < 1e-5


def test_a_model_without_contrib_ops_is_untouched():
    plain = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                                                [helper.make_tensor_value_info("x", 1, [2])],
                                                [helper.make_tensor_value_info("y", 1, [2])]))
    ex = contrib.expand_model(plain)
    assert ex.model is plain and not ex.groups and not ex.refused
    assert contrib.restore(plain, ex) is plain


def test_the_interpreter_runs_a_contrib_statement():
    """A +Graph statement holding a contrib node runs by the node's expansion (interpret.py), giving what
    ORT's kernel gives."""
    from plus_ep.graph_rewrites.interpret import run_pgraph
    from plus_ep.graph_rewrites.ir import Loop, PGraph, Stmt
    case = next(c for c in CASES if c.name == "SkipSimplifiedLayerNorm_float32")
    loop = Loop(10, True, ["skipSimplifiedLayerNormalization"], [Stmt(case.node, "skipSimplifiedLayerNormalization")])
    pg = PGraph([loop], inputs=["x", "skip", "g"], outputs=["y", "sum"])
    got = run_pgraph(pg, {k: case.feeds[k] for k in ("x", "skip", "g")}, opset=17)
    want = cc.reference(case)
    for name in ("y", "sum"):
        assert cc.rel_err(got[name], want[name]) <= case.tol
