"""Attention as ORT's quantize_static writes it (QDQ on Q, K, V, the scores, the logits, the probabilities and the
output) is one attention kernel: the role finder accepts a per-tensor quantization of the probabilities between
the Softmax and the PV MatMul, and the renderer turns it into the probability hook (attention.cuh PLUS_HAS_PROB,
the kernel's exact second pass). What it cannot apply exactly it refuses with the reason `plus-ep explain` shows."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from plus_ep.explain import explain, format_explanation
from plus_ep.kernels import render as render_mod
from plus_ep.kernels.target import Target
from plus_ep.rewrite import rewrite_detailed
from tests.support.quant_models import attention_model


def _render(r, math_="exact"):
    (sg,) = r.subgraphs
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    return render_mod.render(r.view, sg, ins, outs, Target("sm_80", math_))


@pytest.mark.parametrize("probs", [("uint8", 1 / 255, 0), ("int8", 1 / 255, -128)])
def test_qdq_attention_is_one_kernel_with_the_probability_hook(probs):
    r = rewrite_detailed(attention_model(probs=probs), compile_kernels=False)
    (sg,) = r.subgraphs
    assert sg.pattern.name == "attention" and sg.roles.quantized_probs
    ops = [r.view.nodes[i].op_type for i in sg.nodes]
    assert ops.count("QuantizeLinear") == ops.count("DequantizeLinear") == 8     # every Q/DQ inside the kernel
    src = "".join(v.source for v in _render(r).variants)
    assert "#define PLUS_HAS_PROB 1" in src
    hook = src[src.index("plus_prob("):]
    hook = hook[:hook.index("\n}\n")]
    assert "rintf((p / 0.00392156" in hook                      # the probabilities, on their own scale's grid
    assert f"- ({probs[2]}LL)" in hook                           # with their zero point


def test_plain_attention_has_no_probability_hook():
    m = attention_model()
    keep = [n for n in m.graph.node if not n.output[0].startswith("pq_")]
    for n in keep:
        n.input[:] = ["p" if x == "pq_d" else x for x in n.input]
    del m.graph.node[:]
    m.graph.node.extend(keep)
    r = rewrite_detailed(m, compile_kernels=False)
    (sg,) = r.subgraphs
    assert not sg.roles.quantized_probs
    assert "PLUS_HAS_PROB" not in "".join(v.source for v in _render(r).variants)


def _with_prob_scale(scale):
    m = attention_model()
    inits = [t for t in m.graph.initializer if t.name != "pq_s"]
    inits.append(numpy_helper.from_array(np.asarray(scale, np.float32), "pq_s"))
    del m.graph.initializer[:]
    m.graph.initializer.extend(inits)
    return m


def test_per_axis_quantized_probabilities_are_refused_with_the_reason():
    m = _with_prob_scale(np.full(150, 1 / 255))
    for n in m.graph.node:
        if n.output[0] in ("pq_q", "pq_d"):
            n.attribute.append(helper.make_attribute("axis", 3))
    m.graph.input[0].type.tensor_type.shape.dim[2].dim_value = 150
    r = rewrite_detailed(m, compile_kernels=False)
    assert "attention" not in [sg.pattern.name for sg in r.subgraphs]
    text = format_explanation(explain(r, "attention", r.identifier.warehouse[0]), "m.onnx")
    assert "not one constant" in text and "per-tensor quantization" in text


def test_explain_lists_the_folded_quantized_matmul():
    """A MatMul of two DequantizeLinear outputs folded into MatMulInteger is listed with what it became (the fold's
    table entry: it is a standard op, not a contrib one)."""
    from tests.support.quant_models import linear_model
    r = rewrite_detailed(linear_model("qdq"), compile_kernels=False)
    text = format_explanation(explain(r, "gemm", r.identifier.warehouse[0]), "m.onnx")
    assert "MatMulInteger of the stored 8-bit operands" in text and "fused into gemm" in text


def test_cli_explain_on_a_qdq_attention_model(tmp_path, capsys):
    import onnx

    from plus_ep import cli
    from tests.support.quant_models import linear_model
    for name, model in (("attention", attention_model()), ("gemm", linear_model("qdq_view"))):
        path = tmp_path / f"{name}.onnx"
        onnx.save(model, str(path))
        assert cli.main(["explain", str(path), "--pattern", name]) == 0
        out = capsys.readouterr().out
        assert "matched exactly" in out or "exact" in out, out
