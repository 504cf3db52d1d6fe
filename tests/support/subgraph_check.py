"""Check fused subgraphs of a rewrite with the +Graph interpreter against ONNX Runtime.

Shared by the ONNX backend suite (tests/support/onnx_backend_suite.py); tests/zoo/test_interpret.py's zoo check
does the same thing inline and could use these helpers too.

The oracle is ORT's CPU EP on the *original* model with every subgraph boundary tensor added as an
extra graph output: the subgraph's inputs are fed to the interpreter from that run, and its outputs
are compared with it. When the interpreter raises something other than ``InterpreterError`` or
disagrees with ORT, the subgraph's original nodes are run alone with ``onnx.reference``: if that
fails too (or agrees with the interpreter), the cause is onnx.reference, not the +Graph, and the
subgraph is reported as *skipped* with that reason rather than failed.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper

__all__ = ["with_outputs", "boundaries", "SubgraphCheck", "check_subgraphs", "close", "shape_disagreements"]


def with_outputs(model: onnx.ModelProto, names) -> onnx.ModelProto:
    """A copy of ``model`` whose graph also outputs ``names`` (untyped; ORT infers them)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    m.graph.output.extend(onnx.ValueInfoProto(name=t) for t in names if t not in have)
    return m


def boundaries(result):
    """[(inputs, outputs)] of every fused subgraph of a RewriteResult, in the original model: what
    ``graph_rewrites.partition.boundary`` gives, read from the view's one GraphIndex."""
    index = result.view.graph_index
    return [index.boundary(sub.nodes) for sub in result.subgraphs]


def close(got, want, rtol: float, atol: float) -> str | None:
    """None when ``got`` matches ``want`` (shape, dtype, values within tolerance; NaNs equal), else
    a one-line description of the difference."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"shape {got.shape} != expected {want.shape}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} != expected {want.dtype}"
    if want.dtype == object or want.dtype.kind in "USb":
        bad = int(np.sum(got != want))
        return f"{bad} of {want.size} elements differ" if bad else None
    g, w = got, want
    if w.dtype.kind not in "fc" or w.dtype.itemsize < 4:      # ints, float16, bfloat16, float8
        g, w = g.astype(np.float64), w.astype(np.float64)
    try:
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    except AssertionError as exc:
        lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
        keep = [ln for ln in lines if ln.startswith(("Mismatched", "Max absolute", "Max relative"))]
        return "; ".join(keep or lines[-3:])
    return None


def shape_disagreements(view, values: dict) -> list[str]:
    """Tensors whose statically known dims (GraphView's shape inference) differ from their runtime
    shape in ``values``: the usual cause of a +Graph whose loop sizes are wrong."""
    out = []
    for t, arr in values.items():
        s = view.shapes.get(t)
        if s is None or not hasattr(arr, "shape"):
            continue
        if len(s) != np.ndim(arr) or any(isinstance(d, int) and d != r for d, r in zip(s, np.shape(arr))):
            out.append(f"'{t}' inferred {s}, is {list(np.shape(arr))} at run time")
    return out


@dataclass
class SubgraphCheck:
    index: int
    pattern: str
    seed: str
    nodes: int
    status: str = "passed"           # passed | skipped | failed
    reason: str = ""                 # short, groupable
    detail: str = ""
    stats: dict = field(default_factory=dict)


def _reference_subgraph(result, sub, ins, outs, feeds):
    """Outputs of the subgraph's original nodes run alone by onnx.reference (whole-tensor)."""
    from onnx.reference import ReferenceEvaluator
    view = result.view
    model = view.model
    nodes = [view.nodes[i] for i in sub.nodes]
    inits = {i.name: i for i in model.graph.initializer}
    g = helper.make_graph(nodes, "sub", [onnx.ValueInfoProto(name=t) for t in ins if t not in inits],
                          [onnx.ValueInfoProto(name=t) for t in outs],
                          initializer=[inits[t] for t in ins if t in inits])
    m = helper.make_model(g, opset_imports=list(model.opset_import))
    m.ir_version = model.ir_version
    ev = ReferenceEvaluator(m)
    res = ev.run(None, {t: v for t, v in feeds.items() if t not in inits})
    return dict(zip(outs, res))


def check_subgraphs(result, ref_values: dict, rtol: float = 1e-3, atol: float = 1e-5,
                    bounds=None) -> list[SubgraphCheck]:
    """Run every fused subgraph of ``result`` (a plus_ep.rewrite.RewriteResult) through the +Graph
    interpreter on ``ref_values`` (tensor name -> array: the feeds and the original model's
    boundary tensors as ORT computed them) and compare with ORT."""
    from plus_ep.graph_rewrites.interpret import InterpreterError, run_subgraph
    checks = []
    view = result.view
    bounds = boundaries(result) if bounds is None else bounds
    for k, (sub, (ins, outs)) in enumerate(zip(result.subgraphs, bounds)):
        c = SubgraphCheck(k, sub.pattern.name, view.node_label(sub.seed), len(sub.nodes))
        checks.append(c)
        missing = [t for t in outs if t not in ref_values]
        if missing:
            c.status, c.reason = "skipped", "no ORT reference value for a subgraph output"
            c.detail = f"{missing}"
            continue
        feeds = {t: ref_values[t] for t in ins if t in ref_values}
        try:
            got = run_subgraph(result, sub, feeds, stats=c.stats)
        except InterpreterError as exc:
            c.status, c.reason, c.detail = "failed", "interpreter error", str(exc)
            continue
        except Exception as exc:            # an onnx.reference op failing, or a bug of ours
            why = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"
            try:
                _reference_subgraph(result, sub, ins, outs, feeds)
            except Exception as exc2:
                c.status = "skipped"
                c.reason = "interpreter cannot run it: onnx.reference fails on the original nodes"
                c.detail = f"{why} / alone: {type(exc2).__name__}: {str(exc2)[:200]}"
                continue
            c.status, c.reason, c.detail = "failed", "interpreter crash", why
            continue
        bad = {}
        for t in outs:
            if t not in got:
                bad[t] = "not produced"
                continue
            diff = close(got[t], ref_values[t], rtol, atol)
            if diff:
                bad[t] = diff
        if not bad:
            continue
        try:
            alone = _reference_subgraph(result, sub, ins, outs, feeds)
            same = all(t in got and close(got[t], alone[t], 1e-6, 1e-6) is None for t in bad)
        except Exception:
            alone, same = None, False
        if same:
            c.status = "skipped"
            c.reason = "onnx.reference differs from ORT on the original nodes (interpreter agrees with it)"
        else:
            c.status, c.reason = "failed", "interpreter mismatch"
        c.detail = "; ".join(f"'{t}': {d}" for t, d in bad.items())
    return checks
