"""GEMM + residual + LayerNorm/RMSNorm subgraphs with static shapes, rendered for one arch, and their
float64 numpy reference (tests/emulated/test_gemm_norm_cluster*.py)."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

NP = {TensorProto.FLOAT16: np.float16, TensorProto.FLOAT: np.float32}


def norm_model(M, N, K, dt=TensorProto.FLOAT16, rms=False, bias=True, sum_out=False, seed=0, gemm=False):
    """(model, inputs): Y = Norm(X @ W [+ B] + R) over the last axis (gamma g, LayerNorm beta bb), X [M, K],
    R [M, N]; with sum_out the residual sum S is a graph output too. Weights are initializers. M may be a
    symbol name (then the inputs have 64 rows). gemm=True: one ONNX Gemm (transB=1, W stored [N, K], the
    bias as its C input)."""
    rng = np.random.default_rng(seed)
    if gemm:
        nodes = [helper.make_node("Gemm", ["X", "Wt"] + (["B"] if bias else []), ["mb"], transB=1, name="mm")]
    else:
        nodes = [helper.make_node("MatMul", ["X", "W"], ["mm"], name="mm")]
    last = "mb" if gemm else "mm"
    if bias and not gemm:
        nodes.append(helper.make_node("Add", ["mm", "B"], ["mb"], name="bias"))
        last = "mb"
    nodes.append(helper.make_node("Add", [last, "R"], ["S"], name="residual"))
    if rms:
        nodes.append(helper.make_node("RMSNormalization", ["S", "g"], ["Y"], axis=-1, epsilon=1e-5, name="norm"))
    else:
        nodes.append(helper.make_node("LayerNormalization", ["S", "g", "bb"], ["Y"], axis=-1, epsilon=1e-5,
                                      name="norm"))
    w = {"W": rng.standard_normal((K, N)) / np.sqrt(K), "g": 1 + 0.5 * rng.standard_normal(N)}
    if bias:
        w["B"] = rng.standard_normal(N)
    if not rms:
        w["bb"] = rng.standard_normal(N)
    w = {k: _round(v, dt) for k, v in w.items()}
    if gemm:
        w["Wt"] = np.ascontiguousarray(w.pop("W").T)
    vi = helper.make_tensor_value_info
    outs = [vi("Y", dt, [M, N])] + ([vi("S", dt, [M, N])] if sum_out else [])
    g = helper.make_graph(nodes, "gemm_norm", [vi("X", dt, [M, K]), vi("R", dt, [M, N])], outs,
                          [helper.make_tensor(k, dt, v.shape, v.astype(np.float32).ravel().tolist())
                           for k, v in w.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)
    rows = 64 if isinstance(M, str) else M
    inputs = {"X": _round(rng.standard_normal((rows, K)), dt), "R": _round(rng.standard_normal((rows, N)), dt)}
    _low_variance_rows(inputs, w, dt, rms, bias, rng)
    return model, {**w, **inputs}


LOW_ROWS = 4


def _low_variance_rows(inputs, w, dt, rms, bias, rng):
    """Rows 0..LOW_ROWS-1 of the residual R cancel X @ W (+ B) up to a spread of 0.02, so that S's row is
    nearly constant (LayerNorm: c + noise; RMSNorm: noise alone): variance ~4e-4, where the epsilon
    (1e-5) is visible: a kernel using another epsilon (or dropping it, or the variance of another row)
    is off by O(1) there, not by a rounding."""
    wm = w["W"] if "W" in w else w["Wt"].T
    xw = inputs["X"][:LOW_ROWS].astype(np.float64) @ wm + (w["B"] if bias else 0.0)
    c = 0.0 if rms else rng.uniform(-3, 3, size=(len(xw), 1))
    inputs["R"][:LOW_ROWS] = _round(c - xw + 0.02 * rng.standard_normal(xw.shape), dt)


def reshaped_model(B, S, N, K, seed=0):
    """(model, inputs), f16, GPT-2's layout: X [B, S, K] reshaped to [B*S, K], Gemm with bias, reshaped back
    to [B, S, N], + R, LayerNorm, its output reshaped to [B*S, N] (Y); the residual sum (S) is an output too."""
    rng = np.random.default_rng(seed)
    dt = TensorProto.FLOAT16
    w = {"W": rng.standard_normal((K, N)) / np.sqrt(K), "B": rng.standard_normal(N), "g": 1 + 0.5 * rng.standard_normal(N),
         "bb": rng.standard_normal(N)}
    w = {k: _round(v, dt) for k, v in w.items()}
    shapes = {"s2k": [B * S, K], "s3": [B, S, N], "s2n": [B * S, N]}
    nodes = [helper.make_node("Reshape", ["X", "s2k"], ["x2"]), helper.make_node("Gemm", ["x2", "W", "B"], ["mb"]),
             helper.make_node("Reshape", ["mb", "s3"], ["m3"]), helper.make_node("Add", ["m3", "R"], ["S"]),
             helper.make_node("LayerNormalization", ["S", "g", "bb"], ["y3"], axis=-1, epsilon=1e-5),
             helper.make_node("Reshape", ["y3", "s2n"], ["Y"])]
    vi = helper.make_tensor_value_info
    inits = [helper.make_tensor(k, dt, v.shape, v.ravel().tolist()) for k, v in w.items()]
    inits += [helper.make_tensor(k, TensorProto.INT64, [len(v)], v) for k, v in shapes.items()]
    g = helper.make_graph(nodes, "gemm_norm_reshaped", [vi("X", dt, [B, S, K]), vi("R", dt, [B, S, N])],
                          [vi("Y", dt, [B * S, N]), vi("S", dt, [B, S, N])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    inputs = {"X": _round(rng.standard_normal((B, S, K)), dt), "R": _round(rng.standard_normal((B, S, N)), dt)}
    return model, {**w, **inputs, **{k: np.array(v, np.int64) for k, v in shapes.items()}}


def _round(a, dt):
    """float32 values exactly representable in dt (fp16, bf16 or fp32)."""
    a = np.asarray(a, np.float32)
    if dt == TensorProto.FLOAT16:
        return a.astype(np.float16).astype(np.float32)
    if dt == TensorProto.BFLOAT16:
        u = a.view(np.uint32).astype(np.uint64)
        return ((((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32)).view(np.float32)
    return a


def reference(values, dt, rms=False, bias=True, eps=1e-5):
    """(S, Y) in float64 from the inputs' exact values; S rounded to dt first, as the graph holds it."""
    s, y, _ = reference_bound(values, dt, rms, bias, eps)
    return s, y


def reference_bound(values, dt, rms=False, bias=True, eps=1e-5):
    """(S, Y, bound on |Y_kernel - Y| per element): Y in float64 from S rounded to dt, as the graph holds
    it; the bound is verify's LayerNorm/RMSNorm rule (plus_ep.verification.bounds.layernorm, without its
    MARGIN) on S known within one rounding to dt (the fused kernel normalises the fp32 sum it stores),
    with Y rounded to dt."""
    from plus_ep.verification.bounds import Bounded, layernorm, unit
    v = {k: np.asarray(a, np.float64) for k, a in values.items()}
    w = v["W"] if "W" in v else v["Wt"].T
    s = v["X"] @ w + (v["B"] if bias else 0.0) + v["R"]
    s = _round(s, dt).astype(np.float64)
    c = s if rms else s - s.mean(-1, keepdims=True)
    y = c / np.sqrt((c * c).mean(-1, keepdims=True) + eps) * v["g"] + (0.0 if rms else v["bb"])
    x = Bounded.exact(s, dt)
    x = Bounded(x.v, unit(dt) * np.abs(s), x.dtype)
    bounded, _, _ = layernorm(x, Bounded.exact(v["g"]), None if rms else Bounded.exact(v["bb"]), -1, eps, rms)
    return s, y, bounded.e


SOFTMAX_PATTERN = '''from plus_ep.warehouse import pattern


@pattern("gemm_softmax", before="gemm", family="gemm_rownorm")
def gemm_softmax(b):
    """GEMM with a softmax over N in its epilogue (the README's user pattern)."""
    return b.Softmax(b.MatMul(b.input("x", ["M", "K"]), b.input("w", ["K", "N"])), axis=-1)
'''


def softmax_model(M, N, K, seed=0):
    """(model, inputs): Y = Softmax(X @ W) over N in f16, W an initializer (needs SOFTMAX_PATTERN)."""
    rng = np.random.default_rng(seed)
    w, x = _round(rng.standard_normal((K, N)), TensorProto.FLOAT16), _round(rng.standard_normal((M, K)), TensorProto.FLOAT16)
    vi = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node("MatMul", ["X", "W"], ["mm"]), helper.make_node("Softmax", ["mm"], ["Y"])],
                          "gemm_softmax", [vi("X", TensorProto.FLOAT16, [M, K])], [vi("Y", TensorProto.FLOAT16, [M, N])],
                          [helper.make_tensor("W", TensorProto.FLOAT16, w.shape, w.ravel().tolist())])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), {"X": x, "W": w}


def render_subgraph(model, arch="sm_90a", fp32_math="exact", warehouse=None,
                    patterns=("gemm_layernorm", "gemm_rmsnorm"), excluded=()):
    """(Rendered, input names, output names) of the model's one GEMM + norm subgraph; `excluded`: config
    names the route model must not pick (as the kernel build excludes configs that failed to compile)."""
    from plus_ep.kernels.render import render
    from plus_ep.kernels.target import Target
    from plus_ep.rewrite import rewrite_detailed
    r = rewrite_detailed(model, warehouse=warehouse)
    (sg,) = [s for s in r.subgraphs if s.pattern.name in patterns]
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    return render(r.view, sg, ins, outs, Target(arch, fp32_math, excluded), node_name="gemm_norm"), ins, outs


def device_array(a, dt):
    """The bytes a kernel reads for float32 values `a` of ONNX type dt (bf16 as uint16 bits)."""
    if dt == TensorProto.BFLOAT16:
        return (np.asarray(a, np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return np.asarray(a, NP[dt])


def host_value(raw, dt):
    if dt == TensorProto.BFLOAT16:
        return (raw.astype(np.uint32) << 16).view(np.float32)
    return raw.astype(np.float32)


def run_route(rd, route: int, inputs: list, outputs: list, arch="sm_90a", ptx_edit=None, **launch):
    """Launch every kernel of route `route` of a static-shape render on the CPU PTX interpreter (checkers
    on, poisoned outputs); returns (outputs like the `outputs` arrays, [LaunchResult]). `ptx_edit(text) ->
    text` mutates the PTX before it is parsed (mutation tests)."""
    from tests.support.run_rendered import launch_route
    return launch_route(rd, inputs, outputs, arch, "gemm_norm", route=route, ptx_edit=ptx_edit, **launch)
