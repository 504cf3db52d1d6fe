"""Every element-wise op of the vocabulary (graph_rewrites/ops.py), with each attribute variant, rendered into a
point-wise kernel, compiled by NVRTC and run on the CPU PTX interpreter, element by element against the ONNX
semantics: float64 onnx.reference with the per-element bounds `plus-ep verify` uses
(plus_ep/verification/bounds.py: a few fp32 ulps for a library function, the formula's own cancellation for
GELU / ELU / SELU in saturation). Inputs span the easy range and what it hides: signed zeros, subnormals, tiny
and huge magnitudes, saturation (|x| 9 .. 104: tanh, erf and exp at the end of their range, exp's overflow),
the float maximum, infinities and NaN; binary ops take every pair of them.

Besides the bound: NaN and infinities exactly where the reference has them, and a zero's sign where ONNX
Runtime and onnx.reference agree on it (-0.0 from Neg, Mul, Gelu of a negative underflow, Floor/Ceil/Round of
-0.3). Boolean and integer results are compared exactly."""
from __future__ import annotations

import functools

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from plus_ep.graph_rewrites import ops
from plus_ep.kernels.render import render
from plus_ep.kernels.target import Target
from tests.support.imports import ROOT
from plus_ep.rewrite import rewrite_detailed
from plus_ep.verification.bounds import compare, evaluate
from tests.support.run_rendered import run_rendered

F, B, I = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")     # onnx.reference on inf and NaN
OPSET = 20        # Gelu
VALUES = np.array([0.0, -0.0, 1e-45, -3e-42, 1e-38, 1e-30, -1e-30, 1e-7, -1e-5, 0.3, -0.3, 0.5, -0.5, 1.0, -1.0,
                   1.5, 2.5, -2.5, 3.0, -3.0, 5.5, 9.0, -9.0, 20.0, -20.0, 50.0, -50.0, 88.5, 89.0, -88.0, -104.0,
                   1e4, -1e4, 1e20, -1e20, 1e30, -1e30, 3e38, -3e38, np.inf, -np.inf, np.nan], np.float32)
INTS = np.array([0, 1, -1, 2, -2, 3, 7, -7, 12, 255, -256, 1 << 20, -(1 << 31), (1 << 40) + 3], np.int64)
BOOLS = np.array([False, True])


def _const(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


# (op, attributes, inputs): inputs name x / z (the swept operands) or constants of CONSTS
CONSTS = {"lo": np.float32(-0.5), "hi": np.float32(2.0), "e2": np.float32(2.0),
          "e3": np.float32(3.0), "e05": np.float32(0.5), "e1": np.float32(1.0), "e17": np.float32(1.7),
          "slope": np.float32(0.25)}
UNARY = [
    ("Relu", {}, "x"), ("Sigmoid", {}, "x"), ("Tanh", {}, "x"), ("Erf", {}, "x"), ("Exp", {}, "x"), ("Log", {}, "x"),
    ("Sqrt", {}, "x"), ("Reciprocal", {}, "x"), ("Abs", {}, "x"), ("Sin", {}, "x"), ("Cos", {}, "x"),
    ("Floor", {}, "x"), ("Ceil", {}, "x"), ("Round", {}, "x"), ("Sign", {}, "x"), ("Softplus", {}, "x"),
    ("Softsign", {}, "x"), ("Mish", {}, "x"), ("Neg", {}, "x"), ("Gelu", {}, "x"),
    ("Gelu", {"approximate": "tanh"}, "x"), ("LeakyRelu", {}, "x"), ("LeakyRelu", {"alpha": 0.3}, "x"),
    ("Elu", {}, "x"), ("Elu", {"alpha": 0.3}, "x"), ("Selu", {}, "x"), ("Selu", {"alpha": 1.5, "gamma": 0.5}, "x"),
    ("HardSigmoid", {}, "x"), ("HardSigmoid", {"alpha": 0.5, "beta": 0.25}, "x"), ("HardSwish", {}, "x"),
    ("Clip", {}, "x"), ("Clip", {}, "x lo"), ("Clip", {}, "x  hi"), ("Clip", {}, "x lo hi"),
    ("Pow", {}, "x e2"), ("Pow", {}, "x e3"), ("Pow", {}, "x e05"), ("Pow", {}, "x e1"), ("Pow", {}, "x e17"),
    ("PRelu", {}, "x slope"), ("Identity", {}, "x"),
]
BINARY = [
    ("Add", {}, "x z"), ("Sub", {}, "x z"), ("Mul", {}, "x z"), ("Div", {}, "x z"), ("Pow", {}, "x z"),
    ("Max", {}, "x z"), ("Min", {}, "x z"), ("Max", {}, "x z x"), ("Min", {}, "z x z"), ("Mod", {"fmod": 1}, "x z"),
    ("PRelu", {}, "x z"), ("Sum", {}, "x z"), ("Sum", {}, "x z x"), ("Mean", {}, "x z"), ("Mean", {}, "x z z"),
]
PREDICATES = [   # float operands, bool results
    ("IsNaN", {}, "x"), ("IsInf", {}, "x"), ("IsInf", {"detect_negative": 0}, "x"),
    ("IsInf", {"detect_positive": 0}, "x"), ("Equal", {}, "x z"), ("Less", {}, "x z"), ("Greater", {}, "x z"),
    ("LessOrEqual", {}, "x z"), ("GreaterOrEqual", {}, "x z"),
]
LOGIC = [("Not", {}, "x"), ("And", {}, "x z"), ("Or", {}, "x z"), ("Xor", {}, "x z")]
INTEGER = [
    ("BitwiseNot", {}, "x"), ("BitwiseAnd", {}, "x z"), ("BitwiseOr", {}, "x z"), ("Mod", {}, "x z"),
    ("Add", {}, "x z"), ("Sub", {}, "x z"), ("Mul", {}, "x z"), ("Max", {}, "x z"), ("Min", {}, "x z"),
    ("Neg", {}, "x"),
]
INT_PREDICATES = [("Equal", {}, "x z"), ("Less", {}, "x z"), ("GreaterOrEqual", {}, "x z")]
# Where(cond, x, z) over every (cond, x, z) triple of bools and values
SELECT = [("Where", {}, "c x z")]


def _grid(kind: str):
    """The swept operands: x alone, or every pair (x, z) (and c for Where)."""
    vals = {"f": VALUES, "i": INTS, "b": BOOLS}[kind]
    x, z = (a.reshape(-1) for a in np.meshgrid(vals, vals, indexing="ij"))
    if kind == "i":
        z = np.where(z == 0, 5, z)           # Mod / integer division by zero is undefined in ONNX
    return x, z


def _node_inputs(spec: str) -> list:
    return [s if s not in ("", None) else "" for s in spec.split(" ")]


GROUPS = {  # name -> (variants, operand kind, operand dtype, output dtype, binary)
    "unary": (UNARY, "f", F, F, False), "binary": (BINARY, "f", F, F, True), "predicates": (PREDICATES, "f", F, B, True),
    "logic": (LOGIC, "b", B, B, True), "integer": (INTEGER, "i", I, I, True),
    "int_predicates": (INT_PREDICATES, "i", I, B, True), "select": (SELECT, "f", F, F, True),
}


def _model(group: str, variants=None):
    """One model per group: every variant applied to the same operands, the results concatenated (one output:
    one point-wise kernel computes them all)."""
    variants, kind, dt, out_dt, binary = GROUPS[group]
    x, z = _grid(kind)
    if not binary:
        x, z = VALUES, VALUES
    n = len(x)
    nodes, inits, outs = [], [], []
    for k, (op, attrs, spec) in enumerate(variants):
        names = _node_inputs(spec)
        for nm in names:
            if nm in CONSTS and nm not in {i.name for i in inits}:
                inits.append(_const(nm, CONSTS[nm]))
        nodes.append(helper.make_node(op, names, [f"o{k}"], **attrs))
        outs.append(f"o{k}")
    nodes.append(helper.make_node("Concat", outs, ["y"], axis=0))
    ins = [helper.make_tensor_value_info("x", dt, [1, n]), helper.make_tensor_value_info("z", dt, [1, n])]
    feeds = {"x": x[None], "z": z[None]}
    if group == "select":
        ins.append(helper.make_tensor_value_info("c", B, [1, n]))
        feeds["c"] = (np.arange(n) % 3 == 1)[None]
    g = helper.make_graph(nodes, group, ins, [helper.make_tensor_value_info("y", out_dt, [len(variants), n])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=10)
    return m, feeds


@functools.lru_cache(maxsize=None)
def _kernel_output(group: str):
    """(model, feeds, the kernel's output) of a group, rendered and run on the interpreter (sm_80, exact)."""
    model, feeds = _model(group)
    r = rewrite_detailed(model, archs=None)
    (sg,) = r.subgraphs
    ops_in = sorted({r.view.nodes[i].op_type for i in sg.nodes})
    assert set(v[0] for v in GROUPS[group][0]) <= set(ops_in), ops_in
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    assert outs == ["y"], outs
    rd = render(r.view, sg, ins, outs, Target("sm_80", "exact"), node_name=f"sweep_{group}")
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    (got,) = run_rendered(rd, [feeds[t] if t in feeds else consts[t] for t in ins], [want], name=f"sweep_{group}")
    return model, feeds, got, want


def _single(op, attrs, names, dt, out_dt, n):
    ins = [helper.make_tensor_value_info(nm, dt if nm != "c" else B, [1, n]) for nm in dict.fromkeys(names)
           if nm and nm not in CONSTS]
    inits = [_const(nm, CONSTS[nm]) for nm in dict.fromkeys(names) if nm in CONSTS]
    g = helper.make_graph([helper.make_node(op, names, ["y"], **attrs)], op, ins,
                          [helper.make_tensor_value_info("y", out_dt, [1, n])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=10)


def _check_variant(group, k):
    model, feeds, got, want_all = _kernel_output(group)
    variants, kind, dt, out_dt, _ = GROUPS[group]
    op, attrs, spec = variants[k]
    names = _node_inputs(spec)
    n = feeds["x"].shape[1]
    single = _single(op, attrs, names, dt, out_dt, n)
    operands = [feeds[nm] if nm in feeds else CONSTS[nm] for nm in names if nm]
    got_k = got[k:k + 1]
    what = f"{op}{attrs or ''}({spec})"
    # the ONNX semantics in float64 with verify's per-element bounds
    res = evaluate(single.graph, [feeds[i.name] for i in single.graph.input], math="exact", opsets={"": OPSET})
    ref = res.outputs[0]
    if op == "PRelu" and "z" in names:
        # ONNX: PRelu(x) = x for x >= 0; onnx.reference computes slope * x there too (0 * inf = NaN)
        x = feeds["x"].astype(np.float64)
        ref.v, ref.e = np.where(x == 0, x, ref.v), np.where(x == 0, 0.0, ref.e)
    c = compare(got_k, ref)
    flat = [(nm, feeds[nm].reshape(-1)) for nm in names if nm in feeds]

    def at(i):
        return ", ".join(f"{nm}={a[i]!r}" for nm, a in dict(flat).items())
    if not c["ok"]:
        i = c.get("worst", [0, 0])[-1]
        raise AssertionError(f"{what}: at {at(i)} the kernel gives {got_k.reshape(-1)[i]!r}, the exact value is "
                             f"{ref.v.reshape(-1)[i]!r} (bound {c.get('worst_bound', 0):.3g}); {c}")
    if out_dt == F and op not in ("Max", "Min"):     # IEEE 754 leaves the sign of max(+0, -0) open
        # a zero's sign, where ONNX Runtime and onnx.reference agree on it
        ref_ort = want_all[k:k + 1].reshape(-1)
        ref_onnx = np.asarray(ReferenceEvaluator(single).run(None, {i.name: feeds[i.name] for i in single.graph.input})[0],
                              np.float32).reshape(-1)
        g = got_k.reshape(-1)
        agreed = (ref_ort == 0) & (ref_onnx == 0) & (np.signbit(ref_ort) == np.signbit(ref_onnx)) & (g == 0)
        bad = agreed & (np.signbit(g) != np.signbit(ref_ort))
        assert not bad.any(), f"{what}: the sign of zero differs at {at(int(np.flatnonzero(bad)[0]))}"
    del operands


def _ids(group):
    return [f"{op}{''.join(f'_{a}{v}' for a, v in attrs.items())}({spec.replace(' ', ',')})"
            for op, attrs, spec in GROUPS[group][0]]


@pytest.mark.parametrize("k", range(len(UNARY)), ids=_ids("unary"))
def test_unary(k):
    _check_variant("unary", k)


@pytest.mark.parametrize("k", range(len(BINARY)), ids=_ids("binary"))
def test_binary_every_pair(k):
    _check_variant("binary", k)


@pytest.mark.parametrize("group", ["predicates", "logic", "integer", "int_predicates", "select"])
def test_predicates_logic_integers_and_select(group):
    for k in range(len(GROUPS[group][0])):
        _check_variant(group, k)


def test_the_sweep_covers_the_vocabulary():
    """Every op with an element expression is swept (a new one fails here until it is added)."""
    swept = {op for variants, *_ in GROUPS.values() for op, _, _ in variants}
    with_c = {n for n, o in ops.OPS.items() if o.c is not None}
    # ops of several typed inputs (scale, zero point) and integer or float8 outputs: swept over every
    # layout and output type there, against ONNX's semantics, by verify on the interpreter
    elsewhere = {"QuantizeLinear": "tests/emulated/test_quant_kernels.py",
                 "DequantizeLinear": "tests/emulated/test_quant_kernels.py"}
    for op, path in elsewhere.items():
        assert f'"{op}"' in (ROOT / path).read_text(), (op, path)
    assert with_c - set(elsewhere) <= swept, sorted(with_c - set(elsewhere) - swept)
    # every attribute the emitters read has a non-default variant
    for op, names in (("Gelu", {"approximate"}), ("LeakyRelu", {"alpha"}), ("Elu", {"alpha"}), ("Selu", {"alpha", "gamma"}),
                      ("HardSigmoid", {"alpha", "beta"}), ("IsInf", {"detect_negative", "detect_positive"}),
                      ("Mod", {"fmod"})):
        seen = {a for variants, *_ in GROUPS.values() for o, attrs, _ in variants if o == op for a in attrs}
        assert names <= seen, (op, names - seen)


EPILOGUE = [("Softplus", {}), ("Sign", {}), ("Elu", {"alpha": 0.3}), ("HardSigmoid", {"alpha": 0.5, "beta": 0.25}),
            ("Gelu", {"approximate": "tanh"}), ("Selu", {"alpha": 1.5, "gamma": 0.5})]


def test_activations_in_a_gemm_epilogue_at_saturation():
    """The same element expressions rendered into a GEMM's epilogue (another emitter context: the accumulator
    bound to `acc`), on GEMM outputs reaching |x| ~ 150 (Softplus past exp's overflow, GELU saturated), with a
    NaN row (Sign(NaN) is NaN)."""
    rng = np.random.default_rng(12)
    K, N = 16, 24
    w = (rng.standard_normal((K, N)) * 4).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["X", "W"], ["p"])]
    nodes += [helper.make_node(op, ["p"], [f"y{k}"], **attrs) for k, (op, attrs) in enumerate(EPILOGUE)]
    g = helper.make_graph(nodes, "epilogue", [helper.make_tensor_value_info("X", F, [2, 9, K])],
                          [helper.make_tensor_value_info(f"y{k}", F, [2, 9, N]) for k in range(len(EPILOGUE))],
                          [numpy_helper.from_array(w, "W")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=10)
    x = (rng.standard_normal((2, 9, K)) * 3).astype(np.float32)
    x[1, 4, 3] = np.nan
    r = rewrite_detailed(model, archs=None)
    (sg,) = r.subgraphs
    assert sg.pattern.name == "gemm", sg.pattern.name
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    rd = render(r.view, sg, ins, outs, Target("sm_80", "exact"), node_name="epilogue")
    got = run_rendered(rd, [x if t == "X" else w for t in ins], [np.zeros((2, 9, N), np.float32)] * len(outs),
                       name="epilogue")
    pre = x.astype(np.float64) @ w.astype(np.float64)
    assert np.nanmax(np.abs(pre)) > 90, "the GEMM outputs do not reach saturation"
    ev = evaluate(model.graph, [x], math="exact", opsets={"": OPSET})
    for t, gk in zip(outs, got):
        c = compare(gk, ev.outputs[int(t[1:])])
        assert c["ok"], (EPILOGUE[int(t[1:])], c)


def test_sin_of_huge_arguments():
    """sinf/cosf beyond 105615 take CUDA's slow argument reduction (Payne-Hanek), whose stack NVRTC addresses
    generically (cvta.local and back): Sin of x up to 3e38, and Sin(x)^2 + 1 (Sin alone: with Cos beside it NVRTC
    computes both by sincosf, whose stack it addresses otherwise)."""
    n = helper.make_node
    nodes = [n("Sin", ["X"], ["s"]), n("Mul", ["s", "s"], ["ss"]), n("Add", ["ss", "one_"], ["sq"])]
    g = helper.make_graph(nodes, "trig", [helper.make_tensor_value_info("X", F, [4, 16])],
                          [helper.make_tensor_value_info(t, F, [4, 16]) for t in ("s", "sq")],
                          [numpy_helper.from_array(np.float32(1.0), "one_")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=10)
    rng = np.random.default_rng(13)
    x = (rng.standard_normal((4, 16)) * 1e8).astype(np.float32)
    x[0, :4] = [1e30, -3e38, 105616.0, -2.5e9]
    r = rewrite_detailed(model, archs=None)
    (sg,) = r.subgraphs
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    rd = render(r.view, sg, ins, outs, Target("sm_80", "exact"), node_name="trig")
    got = run_rendered(rd, [{"X": x, "one_": np.float32(1.0)}[t] for t in ins], [np.zeros((4, 16), np.float32)] * len(outs),
                       name="trig")
    assert (np.abs(x) > 105615).mean() > 0.9
    ev = evaluate(model.graph, [x], math="exact", opsets={"": OPSET})
    want = dict(zip([o.name for o in model.graph.output], ev.outputs))
    for t, gk in zip(outs, got):
        c = compare(gk, want[t])
        assert c["ok"], (t, c)
