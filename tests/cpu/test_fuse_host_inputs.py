"""fuse() emits `FusedHost<n>` nodes (first n inputs CPU-resident shape tensors, kernels/CONTRACT.md §3)
with their function under the same op type, so ORT without the launcher still runs the original graph."""
from __future__ import annotations

import pathlib
import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from plus_ep.graph_rewrites.fuse import MAX_HOST_INPUTS, FusedSubgraph, fuse, fused_op_type, inline_fused, is_fused
from tests.support.shapev_models import feeds, gpt2_like

GEMM = (2, 3, 4)          # MatMul, Add, Reshape of gpt2_like


def _run(model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds())[0]


def test_host_node_and_its_function_share_the_op_type():
    m = gpt2_like()
    out = fuse(m, [FusedSubgraph(GEMM, "gemm", {}, ("shape", "X2", "W", "B"), 1)])
    onnx.checker.check_model(out, full_check=True)
    node = next(n for n in out.graph.node if is_fused(n))
    assert node.op_type == "FusedHost1" and list(node.input) == ["shape", "X2", "W", "B"]
    fn = next(f for f in out.functions if is_fused(f))
    assert (fn.name, fn.overload) == ("FusedHost1", node.overload)
    np.testing.assert_array_equal(_run(out), _run(m))                 # the function body runs on ORT
    inlined = inline_fused(out)
    assert not any(is_fused(n) for n in inlined.graph.node) and not inlined.functions
    np.testing.assert_array_equal(_run(inlined), _run(m))


def test_plain_node_keeps_the_boundary_order():
    out = fuse(gpt2_like(), [FusedSubgraph(GEMM, "gemm", {})])
    node = next(n for n in out.graph.node if is_fused(n))
    assert node.op_type == "Fused" and list(node.input) == ["X2", "W", "B", "shape"]


def test_input_order_must_be_a_permutation_of_the_boundary():
    with pytest.raises(ValueError, match="not a permutation"):
        fuse(gpt2_like(), [FusedSubgraph(GEMM, "gemm", {}, ("shape", "X2", "W"), 1)])
    with pytest.raises(ValueError, match="at most 16"):
        fused_op_type(17)


def test_host_input_limit_is_the_launchers():
    """FusedHost1..FusedHost<n>: the rewriter's n is the launcher's shapev limit, which ort_op.c registers."""
    native = pathlib.Path(__file__).resolve().parents[2] / "plus_ep" / "native"
    abi = native.parents[1] / "kernels" / "templates" / "plus_abi.h"     # plan.h includes it
    limit = int(re.search(r"#define PLUS_MAX_SHAPEV (\d+)", abi.read_text()).group(1))
    assert MAX_HOST_INPUTS == limit
    assert re.search(r"#define PLUS_MAX_HOST_INPUTS PLUS_MAX_SHAPEV\b", (native / "ort_op.c").read_text())
    assert fused_op_type(limit) == f"FusedHost{limit}"
    with pytest.raises(ValueError):
        fused_op_type(limit + 1)
