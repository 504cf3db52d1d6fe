"""fp32 attention follows the fp32 math option as the GEMMs do: `tf32` (the default of rewrite / the EP)
renders the TF32 tensor-core path of attention.cuh (PLUS_MATH 1, plus_qkv_t float, cp.async / key-major
loads as the f16 path), `exact` the SIMT path (PLUS_MATH 0); when every TF32 config is excluded (spilled or
too big for the arch) the routes fall back to the SIMT menu instead of dropping the subgraph."""
from __future__ import annotations

import pytest

from plus_ep.demo_model import build_bert
from plus_ep.graph_rewrites.partition import boundary
from plus_ep.kernels.families.flash_attention import configs as ac
from plus_ep.kernels.families.flash_attention import routes
from plus_ep.kernels.render import render
from plus_ep.rewrite import rewrite_detailed
from plus_ep.kernels.target import Target


@pytest.fixture(scope="module")
def attention():
    r = rewrite_detailed(build_bert(layers=1, hidden=128, heads=2, intermediate=256, vocab=50))
    sg = next(s for s in r.subgraphs if s.pattern.name == "attention")
    ins, outs = boundary(r.view.model, [r.view.index[i] for i in sg.nodes])
    return r.view, sg, ins, outs


def _sources(attention, fp32_math, arch="sm_80", excluded=()):
    view, sg, ins, outs = attention
    rd = render(view, sg, ins, outs, Target(arch, fp32_math, excluded), node_name="attn")
    return [(v.name, v.source) for v in rd.variants]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_fp32_attention_uses_tf32_tensor_cores_under_tf32(attention, arch):
    for name, src in _sources(attention, "tf32", arch):
        assert name.startswith("tf32_d64_"), name
        assert "#define PLUS_MATH 1\n" in src
        assert "typedef float plus_qkv_t;" in src
        # the K projection's GEMM materialises Kᵀ: the tensor-core path gathers it key-major, as for f16
        assert "#define PLUS_K_KEY_MAJOR 1\n" in src


def test_fp32_attention_stays_exact_under_exact(attention):
    for name, src in _sources(attention, "exact"):
        assert name.startswith("simt_d64_"), name
        assert "#define PLUS_MATH 0\n" in src
        assert "PLUS_K_KEY_MAJOR" not in src


def test_excluded_tf32_configs_fall_back_to_simt(attention):
    srcs = _sources(attention, "tf32", excluded=[c.name for c in ac.configs_for(ac.MATH_TF32, 64)])
    assert srcs and all(name.startswith("simt_d64_") and "#define PLUS_MATH 0\n" in src for name, src in srcs)


def test_attention_math_rule():
    from onnx import TensorProto as T
    assert routes.attention_math({T.FLOAT}, "tf32") == ac.MATH_TF32
    assert routes.attention_math({T.FLOAT}, "exact") == ac.MATH_SIMT
    assert routes.attention_math({T.FLOAT16}, "exact") == ac.MATH_F16
    assert routes.attention_math({T.BFLOAT16}, "tf32") == ac.MATH_F16
    assert routes.attention_math({T.FLOAT16, T.FLOAT}, "tf32") == ac.MATH_SIMT
