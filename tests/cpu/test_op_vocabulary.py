"""The one op vocabulary (graph_rewrites/ops.py): lowering, codegen and the reports agree on it."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from plus_ep.graph_rewrites import ops
from plus_ep.graph_rewrites.graph import GraphView
from plus_ep.graph_rewrites.identify import Identifier
from plus_ep.graph_rewrites.lowering import known_ops
from plus_ep.kernels.codegen import cexpr, pull, row
from plus_ep.warehouse import default_warehouse


def test_every_lowered_op_is_renderable_or_declared_unrenderable():
    for name in sorted(known_ops()):
        op = ops.OPS[name]
        assert op.renderable or op.unrenderable, f"{name}: lowering accepts it, codegen neither renders " \
                                                 "it nor says why not"


def test_codegen_tables_come_from_the_vocabulary():
    with_c = {n for n, o in ops.OPS.items() if o.c is not None}
    assert with_c <= set(cexpr.TABLE)
    assert set(cexpr.TABLE) - with_c == set(ops.with_role("alias"))
    assert pull.VIEW_OPS == ops.with_role("alias")
    assert set(row.REDUCE_OPS) == {n for n, o in ops.OPS.items() if o.reduce}
    for name in ("CastLike", "Selu", "HardSwish", "BitwiseNot", "BitwiseAnd", "BitwiseOr", "PRelu", "Sum",
                 "Mean", "Tile", "Trilu"):
        assert ops.OPS[name].renderable, name


# ---- the new element expressions, compiled with gcc and compared with onnx.reference ------------
_CASES = [  # (op, attrs, input dtypes)
    ("Selu", {}, ["f"]), ("Selu", {"alpha": 1.5, "gamma": 0.5}, ["f"]), ("HardSwish", {}, ["f"]),
    ("PRelu", {}, ["f", "f"]), ("Sum", {}, ["f", "f", "f"]), ("Mean", {}, ["f", "f", "f"]),
    ("BitwiseNot", {}, ["i"]), ("BitwiseAnd", {}, ["i", "i"]), ("BitwiseOr", {}, ["i", "i"]),
]
_X = {"f": [-7.5, -3.0, -0.25, 0.0, 0.5, 2.0, 3.0, 9.0], "i": [-9, -1, 0, 1, 5, 12, 255, 1 << 20]}


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_new_element_expressions_match_onnx(tmp_path):
    lines = ["#include <math.h>", "#include <stdio.h>", "#include <stdbool.h>",
             "#define CUDART_NAN_F NAN", "#define CUDART_INF_F INFINITY", "int main(void) {"]
    expected = []
    for k, (op, attrs, kinds) in enumerate(_CASES):
        node = helper.make_node(op, [f"a{j}" for j in range(len(kinds))], ["y"], **attrs)
        ctype = {"f": cexpr.F, "i": cexpr.I}
        arrays = [np.array(_X[c][j:] + _X[c][:j], dtype=np.float32 if c == "f" else np.int64)
                  for j, c in enumerate(kinds)]
        dt = {"f": TensorProto.FLOAT, "i": TensorProto.INT64}
        g = helper.make_graph([node], "g", [helper.make_tensor_value_info(f"a{j}", dt[c], [8])
                                             for j, c in enumerate(kinds)],
                              [helper.make_tensor_value_info("y", dt[kinds[0]], [8])])
        want = ReferenceEvaluator(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])).run(
            None, {f"a{j}": a for j, a in enumerate(arrays)})[0]
        expected.append(want.astype(np.float64))
        for e in range(8):
            args = [f"(({ctype[c]}){int(arrays[j][e])})" if c == "i" else f"{float(arrays[j][e])!r}f"
                    for j, c in enumerate(kinds)]
            expr, ct = cexpr.emit(node, args, [ctype[c] for c in kinds])
            lines.append(f'  printf("%.9g\\n", (double)({expr}));')
    lines += ["  return 0;", "}"]
    src = tmp_path / "e.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "e"
    subprocess.run(["gcc", "-std=c11", "-O0", str(src), "-o", str(exe), "-lm"], check=True)
    got = np.array([float(v) for v in subprocess.run([str(exe)], capture_output=True, text=True,
                                                      check=True).stdout.split()])
    np.testing.assert_allclose(got, np.concatenate(expected), rtol=1e-6, atol=1e-6)


# ---- identification with kernels requested -------------------------------------------------------
def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def _trilu_model():
    f = TensorProto.FLOAT
    return _model([helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Trilu", ["h", "k"], ["t"]),
                   helper.make_node("Mul", ["t", "t"], ["y"])],
                  [helper.make_tensor_value_info("x", f, [4, 4]),
                   helper.make_tensor_value_info("k", TensorProto.INT64, [])],
                  [helper.make_tensor_value_info("y", f, [4, 4])])


def test_trilu_with_runtime_k_is_unrenderable():
    view = GraphView.build(_trilu_model())
    trilu = next(n for n in view.nodes if n.op_type == "Trilu")
    assert ops.unrenderable_reason(trilu, view) == "Trilu's k is not a constant"
    assert ops.unrenderable_reason(view.nodes[0], view) is None


def test_kernels_requested_keeps_unrenderable_ops_out():
    """Trilu with a run-time k lowers (identification alone fuses it) but the codegen cannot
    render it: with kernels requested it is not grown into, and the identifier says why."""
    view = GraphView.build(_trilu_model())
    trilu = next(i for i, n in enumerate(view.nodes) if n.op_type == "Trilu")
    assert any(trilu in sg.nodes for sg in Identifier(view, default_warehouse()).run())
    ident = Identifier(view, default_warehouse(), kernels=True)
    subgraphs = ident.run()
    assert not any(trilu in sg.nodes for sg in subgraphs)
    assert ident.refused == {trilu: "Trilu's k is not a constant"}


def test_declared_unrenderable_op_is_never_grown_into(monkeypatch):
    f = TensorProto.FLOAT
    m = _model([helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Selu", ["h"], ["y"])],
               [helper.make_tensor_value_info("x", f, [4, 8])], [helper.make_tensor_value_info("y", f, [4, 8])])
    monkeypatch.setitem(ops.OPS, "Selu", ops.Op("Selu", "elementwise", unrenderable="no emitter (test)"))
    view = GraphView.build(m)
    ident = Identifier(view, default_warehouse(), kernels=True)
    selu = next(i for i, n in enumerate(view.nodes) if n.op_type == "Selu")
    assert not any(selu in sg.nodes for sg in ident.run())
    assert ident.refused[selu] == "no emitter (test)"


def test_explain_names_the_nodes_kernels_leave_out(tmp_path):
    from plus_ep.explain import explain, format_explanation
    from plus_ep.rewrite import rewrite_detailed
    r = rewrite_detailed(_trilu_model())
    text = format_explanation(explain(r, "elementwise", r.identifier.warehouse[-1]), "m.onnx")
    assert "with kernels (--arch) Trilu 't' stays out of every subgraph: Trilu's k is not a constant" in text


def test_dropout_whose_mask_is_read_is_unrenderable():
    f = TensorProto.FLOAT
    m = _model([helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Dropout", ["h"], ["d", "mask"]),
                helper.make_node("Cast", ["mask"], ["mf"], to=f), helper.make_node("Add", ["d", "mf"], ["y"])],
               [helper.make_tensor_value_info("x", f, [4, 8])], [helper.make_tensor_value_info("y", f, [4, 8])])
    view = GraphView.build(m)
    dropout = next(n for n in view.nodes if n.op_type == "Dropout")
    assert "mask output is read" in ops.unrenderable_reason(dropout, view)
