"""What the CUDA driver receives per launch (issue 37): a rewritten model with real kernels runs in ORT through the
launcher on the emulated driver (plus_ep/native/emucuda.c), which records every cuLaunchKernel's grid, block and
dynamic shared memory; at shapes where grid x, y and z all exceed 1 and differ, each record must be the grid
the problem needs (the GEMM's column and row tiles and its batch, the attention's query tiles, heads and batch)
and the block and shared memory of the plan's launch line, and the outputs must match the graph. A launcher
that swaps two grid dimensions, or passes the block where the grid goes, fails here; the launcher-harness
tests assert the geometry the launcher computes, not what reaches the driver."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from plus_ep.verification import shapes as vs
from plus_ep.verification.bounds import compare, evaluate
from tests.support.graphs import Graph
from tests.support.kernel_models import run_on_kernels

B, H, S, D = 2, 5, 37, 40          # attention: query tiles x heads x batch, all > 1 and different
BATCH, M, K, N = 5, 37, 24, 150    # batched GEMM: cdiv(N, BN) x cdiv(M, BM) x batch


def geometry_model():
    g = Graph("geometry", opset=18, ir_version=10)
    for t in "qkv":
        g.input(t, [B, H, S, D])
    g.input("pad", [B, 1, 1, S])
    g.input("A", [BATCH, M, K])
    g.input("Bm", [BATCH, K, N])
    g.init("scale", np.array(D ** -0.5, np.float32))
    s = g.op("Add", g.op("Mul", g.op("MatMul", "q", g.op("Transpose", "k", perm=[0, 1, 3, 2])), "scale"), "pad")
    g.op("MatMul", g.op("Softmax", s, axis=-1), "v", out="O")
    g.op("Relu", g.op("MatMul", "A", "Bm"), out="Y")
    g.output("O", [B, H, S, D])
    g.output("Y", [BATCH, M, N])
    return g.model()


def _plan(node) -> str:
    a = next(a for a in node.attribute if a.name == "plus_plan")
    v = helper.get_attribute_value(a)
    return v.decode() if isinstance(v, bytes) else v


@pytest.fixture(scope="module")
def run():
    model = geometry_model()
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.standard_normal(tuple(d.dim_value for d in i.type.tensor_type.shape.dim)).astype(np.float32)
             for i in model.graph.input}
    feeds["pad"][1, ..., -5:] = -1e4
    kr = run_on_kernels(model, feeds, archs=("sm_80",), fp32_math="exact")     # ORT + launcher + emulated driver
    records = [[node, entry, grid, block, smem, error] for node, entry, grid, error, _, _, block, smem, _
               in kr.launches["sm_80"]]
    return model, kr.rewritten, feeds, records, kr.outputs["sm_80"]


def test_the_driver_receives_the_grid_each_kernel_needs(run):
    model, rewritten, feeds, records, _ = run
    fused = {n.name: n for n in rewritten.graph.node if n.domain == "ai.plus_ep"}
    assert sorted({rec[0] for rec in records}) == sorted(fused), records
    for node_name, entry, grid, block, smem, error in records:
        assert error is None, error
        plan = _plan(fused[node_name])
        shapes = [feeds[i].shape if i in feeds else None for i in fused[node_name].input]
        sym = vs.bind(plan, shapes)
        _, kernels = vs.chosen_route(plan, "sm_80", sym)
        (k,) = [k for k in kernels if k[3] == entry]
        want_grid = [vs.rpn(x, sym) for x in k[4:7]]
        want_block = [int(x) for x in k[7:10]]
        assert (grid, block, smem) == (want_grid, want_block, vs.rpn(k[10], sym)), (node_name, entry, k)
        assert min(grid) >= 1 and block[0] % 32 == 0
        if entry == "plus_attention":
            bq = int(k[4].split(",")[-2])
            assert grid == [-(-S // bq), H, B] and len(set(grid)) == 3, grid
        elif entry == "plus_gemm":
            bn, bm = int(k[4].split(",")[-2]), int(k[5].split(",")[-2])
            assert grid == [-(-N // bn), -(-M // bm), BATCH] and min(grid) > 1 and len(set(grid)) == 3, grid
    assert {rec[1] for rec in records} >= {"plus_attention", "plus_gemm"}


def test_the_outputs_are_the_graphs(run):
    model, _, feeds, _, out = run
    ev = evaluate(model.graph, [feeds[i.name] for i in model.graph.input], math="exact")
    for o, want in zip(model.graph.output, ev.outputs):
        c = compare(out[o.name], want)
        assert c["ok"], (o.name, c)
