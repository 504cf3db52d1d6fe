"""Small hand-built [batch, seq, hidden] fp32 models for the kernel regression tests, and their rewrite
with kernels for sm_80 and sm_90a (exact fp32 math, so the verifier's tightest tolerance applies)."""
from __future__ import annotations

import numpy as np
import onnx

import plus_ep
from tests.support.graphs import Graph

H = 32


def bsh_graph(inputs, inits) -> Graph:
    """A graph builder (tests/support/graphs.py) whose `inputs` are [batch, seq, H] fp32 and whose
    initializers are `inits` (name -> array, stored as fp32); add nodes with g.op(...)."""
    g = Graph("regression")
    for n in inputs:
        g.input(n, ["batch", "seq", H])
    for k, a in inits.items():
        g.init(k, a.astype(np.float32))
    return g


def bsh_model(g: Graph, outputs) -> onnx.ModelProto:
    """The model of `g` with `outputs` as [batch, seq, H] fp32 graph outputs."""
    for n in outputs:
        g.output(n, ["batch", "seq", H])
    return g.model()


def rewritten(model):
    """(rewritten model, its fused nodes); fails when a kernel could not be built or nothing fused."""
    r = plus_ep.rewrite_detailed(model, archs=["sm_80", "sm_90a"], fp32_math="exact")
    assert not r.kernels.failures, r.kernels.failures
    fused = [n for n in r.model.graph.node if n.domain == "ai.plus_ep"]
    assert fused, "nothing was fused"
    return r.model, fused
