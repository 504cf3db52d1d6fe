"""Small hand-built [batch, seq, hidden] fp32 models for the kernel regression tests, and their rewrite
with kernels for sm_80 and sm_90a (exact fp32 math, so the verifier's tightest tolerance applies)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import plus_ep

H = 32


def bsh_model(nodes, inputs, outputs, inits) -> onnx.ModelProto:
    """A graph of `nodes` whose inputs and outputs are all [batch, seq, H] fp32; `inits` name -> array."""
    vi = helper.make_tensor_value_info
    g = helper.make_graph(nodes, "regression",
                          [vi(n, TensorProto.FLOAT, ["batch", "seq", H]) for n in inputs],
                          [vi(n, TensorProto.FLOAT, ["batch", "seq", H]) for n in outputs],
                          [numpy_helper.from_array(a.astype(np.float32), k) for k, a in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def rewritten(model):
    """(rewritten model, its fused nodes); fails when a kernel could not be built or nothing fused."""
    r = plus_ep.rewrite_detailed(model, archs=["sm_80", "sm_90a"], fp32_math="exact")
    assert not r.kernels.failures, r.kernels.failures
    fused = [n for n in r.model.graph.node if n.domain == "ai.plus_ep"]
    assert fused, "nothing was fused"
    return r.model, fused
