"""A TorchScript-style shape chain into a fused node (Shape -> Concat -> Reshape after a GEMM): the
rewritten node binds `seq` from the Concat's values (a `shapev` plan line), since its data input is
`[batch*seq, C]`. Used by the CPU-resident shape input tests (tests/native, tests/emulated)."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from tests.support.graphs import Graph


def gpt2_like(width: int = 32, seed: int = 0, allowzero: int | None = None, tail=None, mask_rank: int = 2):
    """Y = Reshape(X2 @ W + B, Concat(Shape(mask), tail)); X2 is [batch*seq, width], mask [batch, seq],
    tail [3*width]. Variants for a 0 in the shape tensor (ONNX Reshape copies the input's dim there
    unless `allowzero` is 1): `tail` [-1] (inferred), or [] with a rank-3 mask (every element from the
    mask, the last one where X2 @ W has no dim: a 0 there has nothing to copy)."""
    rng = np.random.default_rng(seed)
    tail = [3 * width] if tail is None else list(tail)
    g = Graph("gpt2_like", ir_version=10)
    g.input("X2", ["batch*seq", width])
    g.input("mask", ["batch", "seq", "chan"][:mask_rank], TensorProto.INT64)
    g.init("W", rng.standard_normal((width, 3 * width)).astype(np.float32))
    g.init("B", rng.standard_normal(3 * width).astype(np.float32))
    g.op("Shape", "mask", out="mshape" if tail else "shape")
    if tail:
        g.init("C3", np.array(tail, np.int64))
        g.op("Concat", "mshape", "C3", out="shape", axis=0)
    g.op("MatMul", "X2", "W", out="mm")
    g.op("Add", "mm", "B", out="biased")
    g.op("Reshape", "biased", "shape", out="Y", **({} if allowzero is None else {"allowzero": allowzero}))
    g.output("Y", ["batch", "seq", 3 * width] if tail == [3 * width] else None)
    return g.model()


def gpt2_like_rows(width: int = 32, seed: int = 0, **variant):
    """gpt2_like with X2's rows a dim of their own ("rows", not batch*seq): the export where the rewrite
    cannot tie the GEMM's rows to the shape tensor, so the output [batch, seq, 3*width] is bound from the
    shape tensor alone and only the run can tell rows == batch*seq (issue 34 case 1's second export).
    `variant`: gpt2_like's allowzero, tail, mask_rank."""
    m = gpt2_like(width, seed, **variant)
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "rows"
    return m


def feeds(width: int = 32, batch: int = 2, seq: int = 3, seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    return {"X2": rng.standard_normal((batch * seq, width)).astype(np.float32),
            "mask": np.ones((batch, seq), np.int64)}

