"""Row kernels in register mode (kernels/codegen/row.py: a static row of at most 4096 elements is pulled once
into registers; a warp per row up to 1024 elements, a block per row above) on the CPU PTX interpreter against
float64 numpy, per element within verify's LayerNorm bound (outputs start poisoned, the checkers run):

- LayerNormalization at row lengths that are no multiple of the 32 lanes or 256 threads (70, 769, 1000: a warp
  per row, the last element of each lane's stride guarded; 3000: a block per row; 4097: the strided passes),
  13 rows (a block each) and 600 (256 blocks, more than one busy warp in some), fp32 and fp16, with
  low-variance rows mixed in;
- the BERT embedding: Gather of ids (negative ones wrap) + a position table broadcast over the batch, then
  LayerNorm: the row's outer index (batch, position) is named once per row;
- a LayerNorm output plus the input read at another element of the same row (its transpose inside the row):
  that read is not the register copy of the thread's own element."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from plus_ep.kernels.render import render
from plus_ep.kernels.target import Target
from plus_ep.rewrite import rewrite_detailed
from plus_ep.verification.bounds import Bounded, layernorm
from tests.support.run_rendered import run_rendered, static_value

EPS = 1e-5
NP = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16}


def _render(model, pattern):
    r = rewrite_detailed(model)
    (sg,) = [s for s in r.subgraphs if s.pattern.name == pattern]
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    rd = render(r.view, sg, ins, outs, Target("sm_80", "exact"), node_name=pattern)
    assert not rd.plan.syms
    return rd, ins


def _model(nodes, inputs, outputs, inits):
    g = helper.make_graph(nodes, "rows", inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def _check(got, ref, bound, what):
    err = np.abs(got.astype(np.float64) - ref)
    bad = ~(err <= bound)
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {err.size} elements outside the bound; worst "
                           f"{np.unravel_index(np.argmax(err / bound), err.shape)} err {err.max():.3g}")


def _ln_bound(x64, g, b, dtype):
    """verify's LayerNorm rule (plus_ep/verification/bounds.py) over the last axis; the output rounded to `dtype`."""
    y = layernorm(Bounded(x64, np.zeros(x64.shape), dtype), Bounded.exact(g), Bounded.exact(b), -1, EPS)[0]
    return y.v, y.e


def _rows(rng, R, L, dt):
    x = rng.standard_normal((R, L))
    x[:3] = rng.uniform(-3, 3, (3, 1)) + 0.02 * rng.standard_normal((3, L))   # variance ~4e-4: epsilon shows
    return x.astype(dt)


@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.FLOAT16], ids=["f32", "f16"])
@pytest.mark.parametrize("L,mode,R", [(70, "warp", 13), (769, "warp", 13), (1000, "warp", 13), (70, "warp", 600),
                                      (3000, "block", 13), (4097, "strided", 13)])
def test_layernorm_rows_of_odd_length(L, mode, R, dtype):
    """R = 600 rows of a warp each: 256 blocks, rows 256.. on their second and third warps."""
    dt = NP[dtype]
    rng = np.random.default_rng(L)
    x = _rows(rng, R, L, dt)
    g = (1 + 0.5 * rng.standard_normal(L)).astype(dt)
    b = rng.standard_normal(L).astype(dt)
    model = _model([helper.make_node("LayerNormalization", ["X", "g", "b"], ["Y"], axis=-1, epsilon=EPS)],
                   [helper.make_tensor_value_info("X", dtype, [R, L])], [helper.make_tensor_value_info("Y", dtype, [R, L])],
                   [numpy_helper.from_array(g, "g"), numpy_helper.from_array(b, "b")])
    rd, ins = _render(model, "layernorm")
    (launch,) = rd.plan.routes[0].launches
    grid = static_value(launch.grid[0])
    assert grid == (min(R, max(-(-R // 8), 256)) if mode == "warp" else R)
    assert ("plus_warp_sum(" in rd.variants[0].source) == (mode == "warp")
    arrays = {"X": x, "g": g, "b": b}
    (got,) = run_rendered(rd, [arrays[t] for t in ins], [np.zeros((R, L), dt)], name=f"ln_{L}_{dtype}")
    ref, bound = _ln_bound(x.astype(np.float64), g, b, np.dtype(dt).name)
    _check(got, ref, bound, f"LayerNorm L={L} {np.dtype(dt).name}")


@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.FLOAT16], ids=["f32", "f16"])
def test_embedding_layernorm(dtype):
    """ids [3, 5] (15 rows) of a vocabulary of 11, some negative; position table [5, 70] added over the batch."""
    B, S, V, L, dt = 3, 5, 11, 70, NP[dtype]
    rng = np.random.default_rng(7)
    ids = rng.integers(-V, V, (B, S)).astype(np.int64)
    word = rng.standard_normal((V, L)).astype(dt)
    pos = rng.standard_normal((S, L)).astype(dt)
    g = (1 + 0.5 * rng.standard_normal(L)).astype(dt)
    b = rng.standard_normal(L).astype(dt)
    n = helper.make_node
    model = _model([n("Gather", ["W", "ids"], ["e"]), n("Add", ["e", "P"], ["x"]),
                    n("LayerNormalization", ["x", "g", "b"], ["Y"], axis=-1, epsilon=EPS)],
                   [helper.make_tensor_value_info("ids", TensorProto.INT64, [B, S])],
                   [helper.make_tensor_value_info("Y", dtype, [B, S, L])],
                   [numpy_helper.from_array(a, k) for k, a in (("W", word), ("P", pos), ("g", g), ("b", b))])
    rd, ins = _render(model, "layernorm")
    arrays = {"ids": ids, "W": word, "P": pos, "g": g, "b": b}
    (got,) = run_rendered(rd, [arrays[t] for t in ins], [np.zeros((B, S, L), dt)], name=f"embed_ln_{dtype}")
    x = word[ids % V].astype(np.float64) + pos.astype(np.float64)      # the kernel adds in fp32 (exact here)
    ref, bound = _ln_bound(x.astype(dt).astype(np.float64), g, b, np.dtype(dt).name)   # the graph's Add rounds
    # the kernel keeps the Add's result unrounded: allow the difference that rounding makes
    bound = bound + np.abs(_ln_bound(x, g, b, np.dtype(dt).name)[0] - ref)
    _check(got, ref, bound, f"embedding LayerNorm {np.dtype(dt).name}")
    src = rd.variants[0].source        # after the values: a wrong index fails on them first
    assert "const long long o1 = (row) % 5LL;" in src and "plus_warp_sum(" in src


@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.FLOAT16], ids=["f32", "f16"])
def test_layernorm_plus_input_transposed_in_the_row(dtype):
    """Z = LayerNorm(X over its last two axes) + Xᵀ (the row's 8 x 8 block transposed): each element of Z reads X
    at another element of its own row, which the kernel must load, not take from its register copy."""
    R, dt = 11, NP[dtype]
    rng = np.random.default_rng(9)
    x = rng.standard_normal((R, 8, 8)).astype(dt)
    g = (1 + 0.5 * rng.standard_normal((8, 8))).astype(dt)
    b = rng.standard_normal((8, 8)).astype(dt)
    n = helper.make_node
    model = _model([n("LayerNormalization", ["X", "g", "b"], ["Y"], axis=1, epsilon=EPS),
                    n("Transpose", ["X"], ["T"], perm=[0, 2, 1]), n("Add", ["Y", "T"], ["Z"])],
                   [helper.make_tensor_value_info("X", dtype, [R, 8, 8])],
                   [helper.make_tensor_value_info("Z", dtype, [R, 8, 8])],
                   [numpy_helper.from_array(g, "g"), numpy_helper.from_array(b, "b")])
    rd, ins = _render(model, "layernorm")
    assert "xr0[e]" in rd.variants[0].source
    arrays = {"X": x, "g": g, "b": b}
    (got,) = run_rendered(rd, [arrays[t] for t in ins], [np.zeros((R, 8, 8), dt)], name=f"ln_tr_{dtype}")
    x64 = x.astype(np.float64).reshape(R, 64)
    y, e = _ln_bound(x64, g.reshape(64), b.reshape(64), "float32")
    t = x.astype(np.float64).transpose(0, 2, 1).reshape(R, 64)
    ref = y + t
    bound = e + 2.0 ** -23 * np.abs(ref) + (2.0 ** -11 * np.abs(ref) if dt == np.float16 else 0.0)
    _check(got.reshape(R, 64), ref, bound, f"LayerNorm + transposed input {np.dtype(dt).name}")
