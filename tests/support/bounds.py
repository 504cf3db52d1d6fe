"""Per-element error bounds for whole-model runs through the kernels (tests/support/kernel_models.py).

A model's output differs from ONNX Runtime CPU by the rounding of the kernels' math (fp32 summation
order, TF32 / f16 / bf16 operands, f16 activations between kernels), amplified by the model's own
conditioning (a peaky softmax, a LayerNorm of a low-variance row). Rather than one flat tolerance, each
element gets a bound from its own sensitivity, measured: the reference is re-run with every float weight
and input scaled by (1 ± u) (random signs, u the unit roundoff of the math) and the spread of each
element over a few such runs says how much that element moves under rounding of that size.

    spread = sensitivity(model, feeds, UNIT["fp16"])             # {output: array}
    bound = element_bound(ref, spread[name], "fp16")             # THE bound function (one call)
    assert_within(got, ref, bound, "output y")                   # per element, poison and NaN aware

Measured on the demo BERT and zoo exports through correct kernels, |kernel - reference| stays below
about 3.5x (spread + u |ref|) per element (kernels/ptx interpreter, this repository's tests); the bound
takes 10x. A planted bug of 1e-3 of the output scale is far outside it where the math is exact.

This module is the test-only layer over verify's bounds (plus_ep/verification/bounds.py, the one owner
of the bound formulas and unit roundoffs): whole-model bounds measured against ONNX Runtime CPU, the
poison-aware assertion and the float32 reference of a float16 model, none of which `plus-ep verify` needs.
Node-level kernels take analytic bounds from verify's module (LayerNorm / RMSNorm rows:
`plus_ep.verification.bounds.layernorm`, tests/support/gemm_norm_cases.py); the template tests keep their
worst-case GEMM and attention bounds beside their cases (tests/support/ptx_gemm_cases.py,
tests/support/ptx_attention_cases.py), on verify's unit roundoffs.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from plus_ep.verification.bounds import C_TRANSCENDENTAL, U32, U_TF32, unit
from tests.support.poison import unwritten

# unit roundoff of the math a model's kernels run (fp32 "exact" kernels differ from ORT by summation
# order and erf/exp/rsqrt last bits: a few fp32 ulps)
UNIT = {"exact": C_TRANSCENDENTAL * U32, "tf32": U_TF32, "fp16": unit("float16"), "bf16": unit("bfloat16")}
FACTOR = 10.0


def _perturbed(model: onnx.ModelProto, u: float, rng) -> onnx.ModelProto:
    p = onnx.ModelProto()
    p.CopyFrom(model)
    for k, t in enumerate(p.graph.initializer):
        if t.data_type in (TensorProto.FLOAT, TensorProto.FLOAT16):
            a = numpy_helper.to_array(t)
            if a.size >= 16:
                v = a.astype(np.float64) * (1 + u * rng.choice([-1.0, 1.0], a.shape))
                p.graph.initializer[k].CopyFrom(numpy_helper.from_array(v.astype(a.dtype), t.name))
    return p


def sensitivity(model: onnx.ModelProto, feeds: dict, u: float, draws: int = 3, seed: int = 1,
                optimized: bool = True) -> dict:
    """{output name: max over `draws` runs of |ref(perturbed) - ref|}, weights (>= 16 elements) and
    float feeds scaled by (1 ± u) with random signs, on ONNX Runtime CPU (optimized=False: with its graph
    optimizations off)."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if not optimized:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL

    def run(m, f):
        s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return dict(zip([o.name for o in s.get_outputs()], s.run(None, f)))
    ref = run(model, feeds)
    rng = np.random.default_rng(seed)
    spread = {k: np.zeros(v.shape) for k, v in ref.items()}
    for _ in range(draws):
        f = {k: np.asarray(v * (1 + u * rng.choice([-1.0, 1.0], v.shape)), v.dtype) if v.dtype.kind == "f" else v
             for k, v in feeds.items()}
        got = run(_perturbed(model, u, rng), f)
        for k in ref:
            if ref[k].dtype.kind == "f":
                d = np.abs(got[k].astype(np.float64) - ref[k].astype(np.float64))
                spread[k] = np.maximum(spread[k], np.where(np.isfinite(d), d, 0.0))
    return spread


def element_bound(ref: np.ndarray, spread: np.ndarray, math: str) -> np.ndarray:
    """Per-element bound on |kernel - ref|: FACTOR x (measured spread + u |ref|) plus u x the output's
    rms (elements that cancel to ~0)."""
    r = np.abs(np.asarray(ref, np.float64))
    u = UNIT[math]
    fin = np.isfinite(r)
    rms = float(np.sqrt(np.mean(r[fin] ** 2))) if fin.any() else 0.0
    return FACTOR * (np.asarray(spread, np.float64) + u * np.where(fin, r, 0.0)) + u * rms


def assert_within(got: np.ndarray, ref: np.ndarray, bound: np.ndarray, what: str) -> float:
    """Every element written (no poison), non-finite values where the reference has them, and
    |got - ref| <= bound elsewhere. Returns the worst ratio error / bound."""
    got, ref = np.asarray(got), np.asarray(ref)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != {ref.shape}"
    if got.dtype.kind in "iub":
        assert np.array_equal(got, ref), f"{what}: integer output differs"
        return 0.0
    bad = unwritten(got)
    assert not bad.any(), f"{what}: {int(bad.sum())} elements never written (poison) first at {np.argwhere(bad)[0]}"
    g, r = got.astype(np.float64), ref.astype(np.float64)
    fin = np.isfinite(r)
    same_nonfinite = (g == r) | (np.isnan(g) & np.isnan(r))
    assert np.all(same_nonfinite[~fin]), f"{what}: non-finite reference values differ"
    err = np.where(fin, np.abs(g - r), 0.0)
    err = np.where(np.isnan(err), np.inf, err)
    ratio = err / np.maximum(bound, 1e-300)
    worst = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    assert ratio[worst] <= 1.0, (f"{what}: {int((ratio > 1).sum())} of {ratio.size} elements outside their "
                                 f"bound; worst at {tuple(int(i) for i in worst)}: got {g[worst]:.7g}, want "
                                 f"{r[worst]:.7g}, bound {bound[worst]:.3g}")
    return float(ratio[worst])


def upcast_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of a float16 model computing in float32: every float16 input, output, value_info,
    initializer, Constant and Cast target becomes float32 (the higher-precision reference of a float16
    run; its Cast round trips through float16 then round nothing)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT16:
            vi.type.tensor_type.elem_type = TensorProto.FLOAT

    def tensor32(t):
        return numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name)
    for k, t in enumerate(g.initializer):
        if t.data_type == TensorProto.FLOAT16:
            g.initializer[k].CopyFrom(tensor32(t))
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT16:
                a.t.CopyFrom(tensor32(a.t))
            elif n.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT16:
                a.i = TensorProto.FLOAT
    return out
