"""The dynamic_range family (one launch for a dynamic quantization's per-tensor range, scale and zero point):
its kernel, compiled by NVRTC and executed on the CPU PTX interpreter over several CTAs, against ORT CPU's
DynamicQuantizeLinear on the original graph (scale and zero point bit for bit; outputs start poisoned); and the
whole DynamicQuantizeLinear rewritten with kernels and run through the launcher on the emulated driver
(`plus-ep verify`), its three outputs equal to ORT CPU's."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper

import plus_ep
from plus_ep.kernels.render import render
from plus_ep.kernels.target import Target
from plus_ep.rewrite import rewrite_detailed
from tests.support.quant_models import linear_model
from tests.support.run_rendered import launch_route

SHAPE = (3, 70, 96)            # 20160 elements: 10 CTAs of 256 threads, 8 elements each
THREADS, CTAS = 256, 10


def dql_model(shape=SHAPE):
    """x -> DynamicQuantizeLinear -> (y uint8, scale, zero point), all three graph outputs."""
    g = helper.make_graph([helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])], "dql",
                          [helper.make_tensor_value_info("x", T.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", T.UINT8, None),
                           helper.make_tensor_value_info("s", T.FLOAT, None),
                           helper.make_tensor_value_info("z", T.UINT8, None)])
    return onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)],
                                                               ir_version=10))


def _in_last_cta(k: int = 5) -> int:
    """A flat index the grid-stride loop gives to the last CTA (its first pass)."""
    return (CTAS - 1) * THREADS + k


def inputs(kind: str) -> np.ndarray:
    x = (np.random.default_rng(21).standard_normal(SHAPE) * 3).astype(np.float32)
    flat = x.reshape(-1)
    if kind == "extremes_late":        # the maximum in the last CTA's share, the minimum in its last pass
        flat[_in_last_cta()] = 30.0
        flat[-3] = -31.0               # zero point 31 / (61 / 255) = 129.59: rounds up
    elif kind == "positive":           # lo = 0: zero point 0
        x = np.abs(x) + 0.5
    elif kind == "negative":           # hi just above 0: zero point 254 (255, hi = 0, is the harness's poison)
        x = -np.abs(x) - 0.5
        x.reshape(-1)[_in_last_cta(9)] = 0.05
    elif kind == "zeros":              # hi == lo: scale 1
        x = np.zeros(SHAPE, np.float32)
    return x


def _ort(model, x):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        ["y", "s", "z"], {"x": x})


def _range_subgraph(shape=SHAPE):
    r = rewrite_detailed(dql_model(shape), compile_kernels=False)
    assert sorted(s.pattern.name for s in r.subgraphs) == ["dynamic_range", "elementwise"]
    (sg,) = [s for s in r.subgraphs if s.pattern.name == "dynamic_range"]
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    rd = render(r.view, sg, ins, outs, Target("sm_80", "exact"), node_name="dynamic_range")
    (launch,) = rd.plan.routes[0].launches
    assert launch.entry == "plus_dynamic_range"
    return r, rd, ins, outs


@pytest.mark.parametrize("kind,order,repeat", [("normal", "linear", 1), ("extremes_late", "linear", 1),
                                               ("extremes_late", "random", 2), ("positive", "linear", 1),
                                               ("negative", "linear", 1), ("zeros", "linear", 1)])
def test_range_kernel_gives_ort_scale_and_zero_point(kind, order, repeat):
    """Every CTA order, and a second launch on the scratch the first left: ORT CPU's scale and zero point."""
    r, rd, ins, outs = _range_subgraph()
    assert set(outs) >= {"s", "z"}
    x = inputs(kind)
    ys, ss, zs = _ort(dql_model(), x)
    templates = [np.zeros([int(d) for d in (r.view.shape(t) or [])], onnx.helper.tensor_dtype_to_np_dtype(
        r.view.dtypes[t])) for t in outs]
    got, results = launch_route(rd, [x], templates, name=f"dr_{kind}", cta_order=order, seed=3, repeat=repeat)
    assert not [f for res in results for f in res.findings]
    got = dict(zip(outs, got))
    assert got["s"].tobytes() == np.asarray(ss, np.float32).tobytes(), (got["s"], ss)
    assert int(got["z"]) == int(zs)


@pytest.mark.parametrize("x", [np.arange(-24, 27, dtype=np.float32) * 0.5,          # one CTA, ties of x / s
                               np.linspace(1, 4, 36, dtype=np.float32).reshape(4, 9),   # lo = 0
                               np.full((2, 3), -0.0, np.float32)],                      # -0: hi == lo == 0
                         ids=["flat-ties", "positive-2d", "negative-zeros"])
def test_one_cta_ranks_one_and_two(x):
    """Ranks 1 and 2 (the pattern's loops collapse whatever the rank), a single CTA: ORT CPU's scale and zero point."""
    r, rd, ins, outs = _range_subgraph(x.shape)
    model = dql_model(x.shape)
    ys, ss, zs = _ort(model, x)
    templates = [np.zeros([int(d) for d in (r.view.shape(t) or [])], onnx.helper.tensor_dtype_to_np_dtype(
        r.view.dtypes[t])) for t in outs]
    got, _ = launch_route(rd, [x], templates, name="dr_small")
    got = dict(zip(outs, got))
    assert got["s"].tobytes() == np.asarray(ss, np.float32).tobytes() and int(got["z"]) == int(zs)


def test_dynamic_quantize_linear_is_two_launches_through_the_launcher(tmp_path):
    """DynamicQuantizeLinear rewritten with kernels for sm_80: the range kernel and the quantization, run
    through the launcher on the emulated driver; `plus-ep verify` passes and y, scale and zero point equal
    ORT CPU's bit for bit (the extremes sit in the last CTA's share)."""
    model = dql_model()
    r = rewrite_detailed(model, archs=["sm_80"], progress=False)
    assert r.kernels.failures == []
    fused = [nd for nd in r.model.graph.node if nd.domain == "ai.plus_ep"]
    assert sorted(nd.name.split("/")[1] for nd in fused) == ["dynamic_range", "elementwise"]
    assert [nd.op_type for nd in r.model.graph.node if nd.domain != "ai.plus_ep"] == []
    path = tmp_path / "dql.onnx"
    onnx.save(r.model, path)
    x = inputs("extremes_late")
    np.savez(tmp_path / "x.npz", x=x)
    rep = plus_ep.verify(str(path), inputs=str(tmp_path / "x.npz"), cubins=False, stress=False,
                         outputs_to=str(tmp_path / "y.npz"))
    assert rep["ok"], plus_ep.verify_text(rep)
    assert rep["summary"]["executed"] == len(fused)
    got = np.load(tmp_path / "y.npz")
    for name, want in zip(("y", "s", "z"), _ort(model, x)):
        assert got[f"sm_80/{name}"].tobytes() == np.asarray(want).tobytes(), name


def test_ragged_dynamic_linear_quantizes_a_in_the_gemm(tmp_path):
    """M = 99 and K = 70 (neither a tile multiple, K not a 16-byte chunk multiple): the range kernel and one 8-bit
    GEMM quantizing x as it loads it; the output equals ORT CPU's on the original layer to the last float
    roundings of the epilogue (the integer sums are exact)."""
    model = linear_model("dynamic", k=70, n=40, rows=33)
    r = rewrite_detailed(model, archs=["sm_80"], progress=False)
    assert r.kernels.failures == []
    assert sorted(s.pattern.name for s in r.subgraphs) == ["dynamic_range", "gemm_quantized_a"]
    path = tmp_path / "lin.onnx"
    onnx.save(r.model, path)
    x = (np.random.default_rng(8).standard_normal((3, 33, 70)) * 2).astype(np.float32)
    x[2, 32, 69], x[0, 0, 0] = 9.0, -7.0          # the extremes in the last row and column, and the first
    np.savez(tmp_path / "x.npz", x=x)
    rep = plus_ep.verify(str(path), inputs=str(tmp_path / "x.npz"), cubins=False, stress=False,
                         outputs_to=str(tmp_path / "y.npz"))
    assert rep["ok"], plus_ep.verify_text(rep)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = np.load(tmp_path / "y.npz")["sm_80/y"]
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
