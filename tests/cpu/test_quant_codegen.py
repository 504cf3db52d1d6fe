"""QuantizeLinear / DequantizeLinear as the kernels compute them: the C element expressions (kernels/codegen/cexpr.py)
and the float8 helpers (kernels/templates/plus_quant.cuh), compiled with g++ and compared with onnx.reference and ORT
CPU on the edge inputs: ties at .5, both saturation bounds, negative zero points, NaN and infinities, float8
subnormals, overflow with saturate=1 and 0. Also the lowering's nests (scale maps per axis and per block) and the
integer bounds verify applies (plus_ep/verification/bounds.py)."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from plus_ep.graph_rewrites import ops
from plus_ep.graph_rewrites.graph import GraphView
from plus_ep.graph_rewrites.lowering import lower
from plus_ep.kernels.codegen import cexpr
from plus_ep.kernels.compile.nvrtc import TEMPLATES_DIR
from plus_ep.verification import bounds

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

SHIMS = r"""
#include <math.h>
#include <cstdio>
#include <cstring>
#include <limits>
#define PLUS_DEV static inline
#define PLUS_QUANT_HOST 1
#define CUDART_INF_F std::numeric_limits<float>::infinity()
#define CUDART_NAN_F std::numeric_limits<float>::quiet_NaN()
static inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
"""

# x / scale covers: exact ties (.5, 1.5, 2.5 and negatives), both saturation bounds and past them, NaN, +-inf, -0, tiny
X = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.49, -3.51, 126.5, 127.5, 128.0, -128.5, -129.0, 254.5, 255.5,
              300.0, -300.0, 1e9, -1e9, np.nan, np.inf, -np.inf, -0.0, 1e-30, 7.5, -8.5, 15.5, 32767.5, -32768.5,
              65535.5, 240.0, 247.9, 248.0, 464.0, 470.0, 57344.0, 61439.0, 61440.0, 0.0009765625, 0.0013,
              1.52587890625e-05, 3e-6], np.float32)


def _model(node, inputs, inits, opset=21, out_type=0):
    g = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info(node.output[0], out_type, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _reference_q(qtype, scale, zp, sat):
    attrs = {"saturate": sat} if qtype in ops.FLOAT8 else {}
    if zp is None:
        attrs["output_dtype"] = qtype
    ins = ["x", "s"] + (["z"] if zp is not None else [])
    inits = [numpy_helper.from_array(np.array(scale, np.float32), "s")]
    if zp is not None:
        inits.append(helper.make_tensor("z", qtype, [], [zp]))
    m = _model(helper.make_node("QuantizeLinear", ins, ["y"], **attrs),
               [helper.make_tensor_value_info("x", T.FLOAT, [X.size])], inits)
    return np.asarray(ReferenceEvaluator(m).run(None, {"x": X})[0]).astype(np.float64)


def _run_cpp(tmp_path, body: str) -> list:
    src = tmp_path / "q.cpp"
    src.write_text(SHIMS + f'#include "{TEMPLATES_DIR}/plus_quant.cuh"\n' +
                   f"int main() {{\n{body}\n return 0; }}\n")
    exe = tmp_path / "q"
    subprocess.run(["g++", "-std=c++17", "-O1", "-fno-fast-math", str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    return [float(v) for v in out]


Q_CASES = [  # (quantized type, scale, zero point, saturate)
    (T.INT8, 1.0, 0, 1), (T.INT8, 0.5, -7, 1), (T.UINT8, 1.0, 3, 1), (T.UINT8, 2.0, 250, 1), (T.INT16, 1.0, -5, 1),
    (T.UINT16, 1.0, 9, 1), (T.INT4, 1.0, -2, 1), (T.UINT4, 0.25, 1, 1), (T.INT8, 1.0, None, 1),
    (T.FLOAT8E4M3FN, 1.0, 0, 1), (T.FLOAT8E4M3FN, 1.0, 0, 0), (T.FLOAT8E5M2, 1.0, 0, 1), (T.FLOAT8E5M2, 1.0, 0, 0),
    (T.FLOAT8E4M3FN, 0.125, None, 1),
]


@needs_gxx
def test_quantize_expression_matches_onnx_reference(tmp_path):
    """Every (type, scale, zero point, saturate) case's C expression gives onnx.reference's value on every edge input,
    NaN included (integers: the lower bound, as ORT CPU)."""
    body, want = [], []
    for qtype, scale, zp, sat in Q_CASES:
        node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], **({"saturate": sat} if qtype in ops.FLOAT8
                                                                          else {}))
        args, types = (["x", "s", f"{zp}LL"], [cexpr.F, cexpr.F, cexpr.I]) if zp is not None and qtype not in \
            ops.FLOAT8 else (["x", "s"], [cexpr.F, cexpr.F])
        expr, ct = cexpr.emit(node, args, types, qtype=qtype)
        body.append(f"{{ const float s = {scale!r}f; const float xs[] = {{{', '.join(cexpr.lit(float(v)) for v in X)}}};"
                    f" for (float x : xs) printf(\"%.17g\\n\", (double)({expr})); }}")
        w = _reference_q(qtype, scale, zp, sat)
        if qtype in ops.INT_RANGES:      # onnx.reference casts inf and NaN with numpy (undefined, and the zero point
            lo, hi = ops.INT_RANGES[qtype]   # may wrap it): ORT saturates inf and sends NaN to the lower bound
            big = np.abs(X.astype(np.float64) / scale) >= 2.0 ** 31      # its int32 cast overflows too
            w[big & (X > 0)], w[big & (X < 0)], w[np.isnan(X)] = hi, lo, lo
        want.append(w)
    got = np.array(_run_cpp(tmp_path, "\n".join(body))).reshape(len(Q_CASES), X.size)
    for (qtype, scale, zp, sat), g, w in zip(Q_CASES, got, want):
        same = (g == w) | (np.isnan(g) & np.isnan(w))
        assert same.all(), (T.DataType.Name(qtype), scale, zp, sat, X[~same], g[~same], w[~same])


def test_integer_nan_goes_to_the_lower_bound_as_in_ort():
    """The rule _quantize writes down (NaN -> lower bound) is ORT CPU's, for int8 and uint8 with a zero point."""
    import onnxruntime as ort
    for qtype, zp, lo in ((T.INT8, 3, -128), (T.INT8, -7, -128), (T.UINT8, 200, 0)):
        x = np.array([np.nan] * 17 + [1.0], np.float32)
        inits = [numpy_helper.from_array(np.array(1.0, np.float32), "s"), helper.make_tensor("z", qtype, [], [zp])]
        m = _model(helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"]),
                   [helper.make_tensor_value_info("x", T.FLOAT, [18])], inits, opset=13, out_type=qtype)
        y = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        assert (y[:17] == lo).all() and y[17] == 1 + zp


def test_ort_float8_saturate0_windows():
    """The kernels follow ONNX (onnx.reference, ml_dtypes) for float8 with saturate=0: past the largest value after
    rounding, e4m3fn gives NaN and e5m2 infinity. ORT CPU 1.31 departs in two windows (e4m3fn [480, 496) gives 448,
    e5m2 [61440, 65536) NaN) and agrees elsewhere; this pins where, so a change on either side shows."""
    import onnxruntime as ort
    x = np.array([470, 480, 495, 496, 61000, 61440, 65535, 65536], np.float32)
    got = {}
    for qt in (T.FLOAT8E4M3FN, T.FLOAT8E5M2):
        nodes = [helper.make_node("QuantizeLinear", ["x", "s"], ["q"], output_dtype=qt, saturate=0),
                 helper.make_node("DequantizeLinear", ["q", "s"], ["y"])]
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [x.size])],
                              [helper.make_tensor_value_info("y", T.FLOAT, None)],
                              [numpy_helper.from_array(np.array(1.0, np.float32), "s")])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
        got[qt] = (ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0],
                   ReferenceEvaluator(m).run(None, {"x": x})[0])
    o, r = got[T.FLOAT8E4M3FN]
    assert list(o[1:3]) == [448, 448] and np.isnan(r[1:3]).all() and np.isnan(o[[0, 3]]).all()
    o, r = got[T.FLOAT8E5M2]
    assert np.isnan(o[5:7]).all() and np.isinf(r[5:7]).all() and o[4] == r[4] == 57344 and np.isinf(o[7])


@needs_gxx
def test_float8_bits_round_trip_every_code(tmp_path):
    """plus_fp8_value decodes each of the 256 codes as ml_dtypes does, and plus_fp8_bits encodes the value back."""
    import ml_dtypes
    codes = np.arange(256, dtype=np.uint8)
    body = []
    for m, bias, e5 in ((3, 7, "false"), (2, 15, "true")):
        body.append(f"for (int c = 0; c < 256; ++c) {{ const float v = plus_fp8_value<{m}, {bias}, {e5}>((unsigned char)c);"
                    f" printf(\"%.17g %d\\n\", (double)v, (int)plus_fp8_bits<{m}, {bias}, {e5}>(v)); }}")
    got = np.array(_run_cpp(tmp_path, "\n".join(body))).reshape(2, 256, 2)
    for k, t in enumerate((ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2)):
        want = codes.view(t).astype(np.float64)
        v, back = got[k, :, 0], got[k, :, 1].astype(int)
        assert ((v == want) | (np.isnan(v) & np.isnan(want))).all()
        nan = np.isnan(want)
        assert (back[~nan] == codes[~nan]).all()            # NaN codes come back as the canonical 0x7f / 0xff
        assert set(back[nan] & 0x7F) == {0x7F}


def test_dequantize_expression_subtracts_integers_first():
    """Integer x and zero point subtract in integers (int32 exactness), then one float product."""
    node = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"])
    expr, ct = cexpr.emit(node, ["x", "s", "z"], [cexpr.I, cexpr.F, cexpr.I])
    assert expr == "((float)((x) - (z)) * s)" and ct == cexpr.F
    expr, _ = cexpr.emit(node, ["x", "s"], [cexpr.F, cexpr.F])
    assert expr == "(x * s)"


# ---- lowering ------------------------------------------------------------------------------------------------
def _view(nodes, inputs, inits, outputs, opset=21):
    g = helper.make_graph(nodes, "g", inputs, outputs, inits)
    m = onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)],
                                                            ir_version=10))
    return GraphView.build(m)


def test_lowering_maps_scales_per_axis_and_per_block():
    x = helper.make_tensor_value_info("x", T.INT8, [4, 6, 8])
    inits = [numpy_helper.from_array(np.ones(6, np.float32), "s_axis"),
             numpy_helper.from_array(np.ones((4, 6, 2), np.float32), "s_block"),
             numpy_helper.from_array(np.float32(1), "s_t")]
    nodes = [helper.make_node("DequantizeLinear", ["x", "s_axis"], ["a"], axis=1),
             helper.make_node("DequantizeLinear", ["x", "s_block"], ["b"], axis=-1, block_size=4),
             helper.make_node("DequantizeLinear", ["x", "s_t"], ["c"])]
    outs = [helper.make_tensor_value_info(t, T.FLOAT, None) for t in "abc"]
    view = _view(nodes, [x], inits, outs)
    (a,), (b,), (c,) = (lower(view, n) for n in view.nodes)
    assert a.kind == "elementwise" and a.ins["s_axis"] == [a.outs["a"][1]]
    assert b.ins["s_block"] == [b.outs["b"][0], b.outs["b"][1], ()]
    assert c.ins["s_t"] == []
    assert ops.quant_layout(view.nodes[1], 3, [4, 6, 2]) == ("block", 2, 4)


def test_matmul_integer_lowers_as_a_dot_with_zero_points_on_m_and_n():
    a = helper.make_tensor_value_info("a", T.UINT8, [5, 16])
    inits = [numpy_helper.from_array(np.zeros((16, 8), np.int8), "w"),
             numpy_helper.from_array(np.zeros(5, np.uint8), "za"), numpy_helper.from_array(np.zeros(8, np.int8), "zb")]
    view = _view([helper.make_node("MatMulInteger", ["a", "w", "za", "zb"], ["y"])], [a], inits,
                 [helper.make_tensor_value_info("y", T.INT32, None)])
    (nest,) = lower(view, view.nodes[0])
    assert nest.op == "dot" and nest.skeleton
    assert nest.ins["za"] == [nest.ins["a"][0]] and nest.ins["zb"] == [nest.ins["w"][1]]


def test_codegen_refuses_what_it_cannot_write():
    """Q to packed int4 (a nibble store would race its neighbour) and a non-zero float8 zero point say why."""
    x = helper.make_tensor_value_info("x", T.FLOAT, [8])
    inits = [numpy_helper.from_array(np.float32(1), "s"), helper.make_tensor("z4", T.INT4, [], [1]),
             helper.make_tensor("z8", T.FLOAT8E4M3FN, [], [1.0])]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z4"], ["q4"]),
             helper.make_node("QuantizeLinear", ["x", "s", "z8"], ["q8"])]
    view = _view(nodes, [x], inits, [helper.make_tensor_value_info("q4", T.INT4, None),
                                      helper.make_tensor_value_info("q8", T.FLOAT8E4M3FN, None)])
    assert "nibble" in ops.unrenderable_reason(view.nodes[0], view)
    assert "zero point" in ops.unrenderable_reason(view.nodes[1], view)


# ---- verify's bounds -----------------------------------------------------------------------------------------
def _q_body(qtype=T.INT8):
    nodes = [helper.make_node("Mul", ["x", "k"], ["t"]),
             helper.make_node("QuantizeLinear", ["t", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    inits = [numpy_helper.from_array(np.float32(1.0), "k"), numpy_helper.from_array(np.float32(0.5), "s"),
             helper.make_tensor("z", qtype, [], [-3])]
    g = helper.make_graph(nodes, "b", [helper.make_tensor_value_info("x", T.FLOAT, [4])],
                          [helper.make_tensor_value_info("q", qtype, None), helper.make_tensor_value_info("y", T.FLOAT, None)],
                          inits)
    return g


def test_bounds_allow_one_quantum_only_where_the_input_may_cross_a_tie():
    """A float input carrying rounding error may quantize either way at a tie: q gets a bound of 1 there and 0
    elsewhere; an integer kernel output off by one where the bound is 0 fails, within it passes."""
    x = np.array([0.25, 0.75, 10.0, 63.0], np.float32)             # x / 0.5 = 0.5, 1.5 (ties), 20, 126 (+zp -3)
    ev = bounds.evaluate(_q_body(), [x], opsets={"": 21})
    q = ev.outputs[0]
    assert list(q.v) == [-3, -1, 17, 123] and list(q.e) == [1, 1, 0, 0]
    ok = np.array([-2, -2, 17, 123], np.int8)
    assert bounds.compare(ok, q)["ok"]
    assert not bounds.compare(np.array([-3, -1, 18, 123], np.int8), q)["ok"]
    y = ev.outputs[1]
    assert y.v[2] == 10.0 and y.e[2] < 1e-5 and y.e[0] >= 0.5       # DQ carries the quantum through its scale


def test_bounds_of_exact_integer_inputs_are_exact():
    rng = np.random.default_rng(1)
    a = rng.integers(0, 256, (3, 16)).astype(np.uint8)
    w = rng.integers(-128, 128, (16, 5)).astype(np.int8)
    za, zb = np.uint8(131), rng.integers(-4, 4, 5).astype(np.int8)
    g = helper.make_graph([helper.make_node("MatMulInteger", ["a", "w", "za", "zb"], ["y"])], "b",
                          [helper.make_tensor_value_info(n, t, None) for n, t in
                           (("a", T.UINT8), ("w", T.INT8), ("za", T.UINT8), ("zb", T.INT8))],
                          [helper.make_tensor_value_info("y", T.INT32, None)])
    y = bounds.evaluate(g, [a, w, za, zb], opsets={"": 13}).outputs[0]
    want = (a.astype(np.int64) - 131) @ (w.astype(np.int64) - zb.astype(np.int64))
    assert (y.v == want).all() and not y.e.any()
    off = want.astype(np.int32)
    off[1, 2] += 1
    assert bounds.compare(want.astype(np.int32), y)["ok"] and not bounds.compare(off, y)["ok"]


def test_compare_takes_a_0d_float_output():
    """A dynamic quantization's scale is a 0-d float output (ReduceMax over all of x, / 255): compared as one
    element (right, off by far, never written), not indexed as a 1-d array."""
    x = np.array([-1.5, 0.25, 3.0], np.float32)
    g = helper.make_graph([helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
                           helper.make_node("Div", ["m", "c"], ["s"])], "d",
                          [helper.make_tensor_value_info("x", T.FLOAT, [3])],
                          [helper.make_tensor_value_info("s", T.FLOAT, [])],
                          [numpy_helper.from_array(np.array(255, np.float32), "c")])
    s = bounds.evaluate(g, [x], opsets={"": 13}).outputs[0]
    want = np.float32(3.0) / np.float32(255)
    assert np.shape(s.v) == () and s.v == pytest.approx(want, rel=1e-6)
    assert bounds.unwritten(np.float32(1.0)).shape == ()
    assert bounds.compare(want, s)["ok"] and not bounds.compare(np.float32(2 * want), s)["ok"]
    assert not bounds.compare(np.frombuffer(b"\xff" * 4, np.float32).reshape(()), s)["ok"]


# ---- redundant fake quantization (graph_rewrites/contrib/quant.py) -----------------------------------------
def _fq_model(second_scale=0.05, second_zp=-3, per_axis=False):
    from onnx import TensorProto
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "s"),
             helper.make_tensor("z", TensorProto.INT8, [], [-3]),
             numpy_helper.from_array(np.array(second_scale, np.float32), "s2"),
             helper.make_tensor("z2", TensorProto.INT8, [], [second_zp]),
             numpy_helper.from_array(np.full(4, 0.05, np.float32), "sa"),
             helper.make_tensor("za", TensorProto.INT8, [4], [-3] * 4),
             numpy_helper.from_array(np.array([2, 12], np.int64), "shape")]
    q2 = ["sa", "za"] if per_axis else ["s2", "z2"]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q1"]),
             helper.make_node("DequantizeLinear", ["q1", "s", "z"], ["d1"]),
             helper.make_node("Transpose", ["d1"], ["t"], perm=[1, 0, 2]),
             helper.make_node("Reshape", ["t", "shape"], ["r"]),
             helper.make_node("QuantizeLinear", ["t"] + q2, ["q2"], axis=2),
             helper.make_node("DequantizeLinear", ["q2"] + q2, ["d2"], axis=2),
             helper.make_node("Relu", ["d2"], ["y"]),
             helper.make_node("Neg", ["r"], ["y2"])]
    g = helper.make_graph(nodes, "fq", [helper.make_tensor_value_info("x", T.FLOAT, [3, 2, 4])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None),
                           helper.make_tensor_value_info("y2", T.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)


def test_redundant_fake_quant_pairs_are_dropped_exactly():
    import onnxruntime as ort
    from plus_ep.graph_rewrites.contrib.quant import redundant_fake_quant
    m = _fq_model()
    out, n = redundant_fake_quant(m)
    assert n == 1 and [x.op_type for x in out.graph.node].count("QuantizeLinear") == 1
    assert len(m.graph.node) == 8                             # the input model is left as it was
    x = np.random.default_rng(0).standard_normal((3, 2, 4)).astype(np.float32) * 10
    x.reshape(-1)[:6] = [0.025, -0.075, np.nan, np.inf, -1e9, 6.4]
    run = lambda mm: ort.InferenceSession(mm.SerializeToString(), providers=["CPUExecutionProvider"]).run(  # noqa: E731
        None, {"x": x})
    for a, b in zip(run(m), run(out)):
        assert a.tobytes() == b.tobytes()                     # bit for bit, NaN included


@pytest.mark.parametrize("kw", [dict(second_scale=0.1), dict(second_zp=0), dict(per_axis=True)])
def test_fake_quant_pairs_with_other_parameters_stay(kw):
    from plus_ep.graph_rewrites.contrib.quant import redundant_fake_quant
    assert redundant_fake_quant(_fq_model(**kw))[1] == 0


# ---- the 8-bit GEMM folds (graph_rewrites/contrib/quant.py) ------------------------------------------------
def test_folds_compute_what_the_quantized_layer_computes_and_undo_when_unfused():
    """Each fold's expansion matches ORT CPU on the original layer (within fp32 rounding: the zero-point correction
    is applied after the exact integer sums); identification keeps the MatMulInteger as a GEMM, and without
    kernels' fusion the original MatMul / MatMulInteger comes back."""
    import onnxruntime as ort
    from plus_ep.graph_rewrites.contrib import expand_model, restore
    from tests.support.quant_models import linear_model
    x3 = (np.random.default_rng(1).standard_normal((2, 70, 96)) * 3).astype(np.float32)
    for kind in ("qdq", "dynamic", "qdq_view"):
        x = x3.reshape(2, 2, 70, 48) if kind == "qdq_view" else x3
        m = linear_model(kind)
        ex = expand_model(m)
        assert len(ex.groups) == (2 if kind == "dynamic" else 1) and not ex.refused   # + DynamicQuantizeLinear's
        ops = [n.op_type for n in ex.model.graph.node]
        assert "MatMulInteger" in ops and ("MatMul" not in ops)
        mi = next(n for n in ex.model.graph.node if n.op_type == "MatMulInteger")
        assert len([t for t in mi.input if t]) == 2                 # no zero points left for the kernel
        run = lambda mm: ort.InferenceSession(mm.SerializeToString(), providers=["CPUExecutionProvider"]).run(  # noqa: E731
            None, {"x": x})[0]
        want, got = run(m), run(ex.model)
        tol = 0.0 if kind == "dynamic" else 0.04                    # qdq: y is requantized (a step of 0.04)
        assert np.abs(got - want).max() <= tol + 1e-5 * np.abs(want).max()
        back = restore(ex.model, ex)
        assert sorted(n.op_type for n in back.graph.node) == sorted(n.op_type for n in m.graph.node)


def test_folds_inside_the_rewritten_model_compute_the_original_layer():
    """The whole rewrite (expansion, identification, the fused nodes' function bodies): run by ORT CPU without
    PlusEP's library (it inlines each fused node's body), the rewritten model computes what the original quantized
    layer computes. `plus-ep verify` compares each kernel with its body, which holds the fold's MatMulInteger and
    corrections, so a wrong fold is this test's to catch (and the previous one's)."""
    import onnxruntime as ort
    from plus_ep.rewrite import rewrite_detailed
    from tests.support.quant_models import linear_model
    x3 = (np.random.default_rng(5).standard_normal((3, 70, 96)) * 3).astype(np.float32)
    for kind in ("qdq", "dynamic", "qdq_view"):
        x = x3.reshape(3, 2, 70, 48) if kind == "qdq_view" else x3
        m = linear_model(kind)
        r = rewrite_detailed(m, archs=["sm_80"], compile_kernels=False)
        assert any(n.domain == "ai.plus_ep" for n in r.model.graph.node)
        assert any(n.op_type == "MatMulInteger" for f in r.model.functions for n in f.node)
        run = lambda mm: ort.InferenceSession(mm.SerializeToString(), providers=["CPUExecutionProvider"]).run(  # noqa: E731
            None, {"x": x})[0]
        want, got = run(m), run(r.model)
        tol = 0.0 if kind == "dynamic" else 0.04                    # qdq: y is requantized (a step of 0.04)
        assert np.abs(got - want).max() <= tol + 1e-5 * np.abs(want).max(), kind


def test_a_fold_put_back_brings_back_the_dequantization_it_read():
    """Two projections of one DQ(a8): both fold and the DQ leaves the graph; when only one fold's GEMM is fused,
    restore puts the other MatMul back together with the DequantizeLinear it reads."""
    from plus_ep.graph_rewrites.contrib import expand_model, restore
    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "sx"), numpy_helper.from_array(np.array(3, np.int8), "zx")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"], name="dq_x")]
    for k in "qk":
        inits += [numpy_helper.from_array(rng.integers(-127, 128, (16, 8)).astype(np.int8), f"w{k}"),
                  numpy_helper.from_array(np.array(0.01, np.float32), f"s{k}")]
        nodes += [helper.make_node("DequantizeLinear", [f"w{k}", f"s{k}"], [f"wd{k}"], name=f"dq_{k}"),
                  helper.make_node("MatMul", ["xd", f"wd{k}"], [f"y{k}"], name=f"mm_{k}")]
    g = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", T.FLOAT, [4, 16])],
                          [helper.make_tensor_value_info(f"y{k}", T.FLOAT, None) for k in "qk"], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)
    ex = expand_model(m)
    names = [n.name for n in ex.model.graph.node]
    assert "dq_x" not in names and "mm_q" not in names and len(ex.groups) == 2
    fused = onnx.ModelProto()
    fused.CopyFrom(ex.model)
    g0 = set(ex.groups[0].names)
    keep = [n for n in fused.graph.node if n.name not in g0]
    keep.append(helper.make_node("Fused", ["xq", "wq"], ["yq"], domain="ai.plus_ep", name="plus_ep/gemm/0"))
    del fused.graph.node[:]
    fused.graph.node.extend(keep)
    back = restore(fused, ex)
    ops = {n.name: n for n in back.graph.node}
    assert "mm_k" in ops and "dq_x" in ops and "mm_q" not in ops
    made = {o for n in back.graph.node for o in n.output} | {"x"} | {t.name for t in back.graph.initializer}
    assert all(t in made for n in back.graph.node for t in n.input if t)
