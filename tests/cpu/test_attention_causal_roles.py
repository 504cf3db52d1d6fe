"""Which causal masks let the attention kernels skip key tiles (AttentionRoles.causal, warehouse `causal_offset`;
rendered as PLUS_HAS_ATTN_CAUSAL): masks the graph builds from a lower Trilu with a -inf fill, in the score chain or
added to it, on the mma.sync and sm_90a bodies; and the masks it must not trust: a finite fill, an upper Trilu, a
mask tensor the graph receives, a Trilu broadcast along the queries, a Trilu k that is not a constant."""
from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from plus_ep.kernels.render import render
from plus_ep.kernels.target import Target
from plus_ep.rewrite import rewrite_detailed
from tests.support import causal_attention_cases as C


def rendered(model, arch):
    r = rewrite_detailed(model, archs=[arch], compile_kernels=False)
    (sg,) = [s for s in r.subgraphs if s.pattern.name == "attention"]
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    return sg, render(r.view, sg, ins, outs, Target(arch), node_name="attn")


def offsets(rd) -> list:
    return [re.findall(r"plus_attn_causal\(const PlusArgs&\) \{ return (-?\d+)LL", v.source) for v in rd.variants]


@pytest.mark.parametrize("arch,body", [("sm_80", "tc_"), ("sm_90a", "wg_")])
@pytest.mark.parametrize("form", C.FORMS)
def test_only_provable_minus_inf_masks_skip(form, arch, body):
    sg, rd = rendered(C.model(form, 2, 2, 70, 129, 64), arch)
    want = 129 - 70 if form in C.SKIPPABLE else None
    assert sg.roles.causal == want, (form, sg.roles.causal)
    assert rd.variants[0].name.startswith(body)
    assert offsets(rd) == [[str(want)] if want is not None else []], offsets(rd)


@pytest.mark.parametrize("form,want", [("lowest", 59), ("lowest_pad", None)])
def test_a_folded_fp32_mask_at_the_lowest_float_skips_only_alone(form, want):
    """torch.onnx's dynamo export of `is_causal` at static shapes: QKᵀ + a constant filled with -3.4e38. Alone it
    leaves every row a visible key (exp(lowest - max) is 0 in fp32); beside a padding term a row may see none,
    whose softmax is then uniform over every key, skipped or not: refused."""
    sg, rd = rendered(C.model(form, 2, 2, 70, 129, 64, TensorProto.FLOAT), "sm_80")
    assert sg.roles.causal == want
    assert offsets(rd) == [[str(want)] if want is not None else []]


def test_diagonal_offset_is_the_trilu_k():
    sg, rd = rendered(C.model("equal", 1, 2, 129, 129, 64, k=-3), "sm_80")
    assert sg.roles.causal == -3 and offsets(rd) == [["-3"]]


def test_a_computed_trilu_k_is_not_trusted():
    """k from an input (a past length the graph reads at run time): no skip."""
    m = C.model("equal", 1, 2, 70, 129, 64)
    diag = next(i for i in m.graph.initializer if i.name == "diag")
    m.graph.initializer.remove(diag)
    m.graph.input.append(helper.make_tensor_value_info("diag", TensorProto.INT64, []))
    sg, rd = rendered(m, "sm_80")
    assert sg.roles.causal is None and offsets(rd) == [[]]


def test_a_negative_scale_after_the_mask_is_not_trusted():
    """-inf times a negative scale is +inf: the mask no longer hides those keys."""
    m = C.model("bool", 1, 2, 70, 129, 64)
    g = m.graph
    soft = next(n for n in g.node if n.op_type == "Softmax")
    g.initializer.append(numpy_helper.from_array(np.array(-1.0, np.float16), "neg"))
    g.node.insert(list(g.node).index(soft), helper.make_node("Mul", [soft.input[0], "neg"], ["flip"]))
    soft.input[0] = "flip"
    sg, _ = rendered(m, "sm_80")
    assert sg.roles.causal is None


def test_non_causal_attention_renders_as_before():
    """The same attention without a causal term: no causal hook (its sources are the golden ones' kind)."""
    sg, rd = rendered(C.model("input", 1, 2, 70, 129, 64), "sm_80")
    assert sg.roles.causal is None and "PLUS_HAS_ATTN_CAUSAL" not in rd.variants[0].source
