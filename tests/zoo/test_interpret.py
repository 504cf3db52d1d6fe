"""The +Graph interpreter: executes loop trees in program order and checks them against ORT."""
from __future__ import annotations

import zlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from plus_ep.graph_rewrites.interpret import InterpreterError, model_program, run_pgraph
from plus_ep.graph_rewrites.primitives import pgraph_of_model
from plus_ep.graph_rewrites.ir import Loop, PGraph, Stmt

ort = pytest.importorskip("onnxruntime")

F = TensorProto.FLOAT
OPSET = 17


def _model(nodes, inputs, outputs, inits=(), opset=OPSET):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def _ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds)))


def _check_against_ort(model, make_feeds):
    pg = pgraph_of_model(model)
    consts, shapes, opset = model_program(model)
    for setting in ({"M": 3, "N": 5, "K": 4}, {"M": 7, "N": 2, "K": 9}):
        feeds = make_feeds(np.random.default_rng(sum(setting.values())), **setting)
        got = run_pgraph(pg, feeds, consts, opset=opset, shapes=shapes)
        want = _ort(model, feeds)
        for name, ref in want.items():
            np.testing.assert_allclose(got[name], ref, atol=1e-5, rtol=1e-5, err_msg=f"{name} at {setting}")


# ---- 1. tiny models vs onnxruntime -------------------------------------------------------------
def test_matmul_softmax():
    """The PluS Fig. 6 subgraph: MatMul -> Softmax (decomposed into ReduceMax/Sub/Exp/ReduceSum/Div)."""
    m = _model([helper.make_node("MatMul", ["a", "b"], ["c"]),
                helper.make_node("Softmax", ["c"], ["y"], axis=-1)],
               [helper.make_tensor_value_info("a", F, ["M", "K"]),
                helper.make_tensor_value_info("b", F, ["K", "N"])],
               [helper.make_tensor_value_info("y", F, ["M", "N"])])
    _check_against_ort(m, lambda rng, M, N, K: {
        "a": rng.standard_normal((M, K)).astype(np.float32),
        "b": rng.standard_normal((K, N)).astype(np.float32)})


def test_matmul_add_relu():
    m = _model([helper.make_node("MatMul", ["a", "w"], ["c"]),
                helper.make_node("Add", ["c", "bias"], ["d"]),
                helper.make_node("Relu", ["d"], ["y"])],
               [helper.make_tensor_value_info("a", F, ["M", "K"]),
                helper.make_tensor_value_info("w", F, ["K", "N"]),
                helper.make_tensor_value_info("bias", F, ["N"])],
               [helper.make_tensor_value_info("y", F, ["M", "N"])])
    _check_against_ort(m, lambda rng, M, N, K: {
        "a": rng.standard_normal((M, K)).astype(np.float32),
        "w": rng.standard_normal((K, N)).astype(np.float32),
        "bias": rng.standard_normal((N,)).astype(np.float32)})


@pytest.mark.parametrize("opset", [17, 18])
def test_residual_layernorm(opset):
    """Add (residual prologue) -> LayerNormalization over a static hidden size."""
    H = 8
    rng = np.random.default_rng(1)
    gamma = numpy_helper.from_array(rng.standard_normal(H).astype(np.float32), "gamma")
    beta = numpy_helper.from_array(rng.standard_normal(H).astype(np.float32), "beta")
    m = _model([helper.make_node("Add", ["x", "r"], ["s"]),
                helper.make_node("LayerNormalization", ["s", "gamma", "beta"], ["y"], axis=-1,
                                 epsilon=1e-5)],
               [helper.make_tensor_value_info("x", F, ["M", "N", H]),
                helper.make_tensor_value_info("r", F, ["M", "N", H])],
               [helper.make_tensor_value_info("y", F, ["M", "N", H])], inits=[gamma, beta], opset=opset)
    _check_against_ort(m, lambda rng, M, N, K: {
        "x": rng.standard_normal((M, N, H)).astype(np.float32),
        "r": rng.standard_normal((M, N, H)).astype(np.float32)})


# ---- 2. negative tests -------------------------------------------------------------------------
def test_consumer_before_producer_raises():
    add = helper.make_node("Add", ["x", "x"], ["t"], name="producer")
    relu = helper.make_node("Relu", ["t"], ["y"], name="consumer")
    pg = PGraph([Loop("M", True, ["relu", "add"], [Stmt(relu, "relu"), Stmt(add, "add")])],
                inputs=["x"], outputs=["y"])
    with pytest.raises(InterpreterError, match=r"consumer.*'t'"):
        run_pgraph(pg, {"x": np.ones(3, np.float32)}, shapes={"x": ["M"], "t": ["M"], "y": ["M"]})
    # the right order runs
    pg.body[0].body.reverse()
    out = run_pgraph(pg, {"x": np.ones(3, np.float32)}, shapes={"x": ["M"], "t": ["M"], "y": ["M"]})
    np.testing.assert_array_equal(out["y"], np.full(3, 2, np.float32))


def test_missing_output_raises():
    relu = helper.make_node("Relu", ["x"], ["y"])
    pg = PGraph([Loop("M", True, ["relu"], [Stmt(relu, "relu")])], inputs=["x"], outputs=["y", "z"])
    with pytest.raises(InterpreterError, match="'z'"):
        run_pgraph(pg, {"x": np.ones(3, np.float32)})


def test_loop_size_contradicts_runtime_shape():
    mm = helper.make_node("MatMul", ["a", "b"], ["c"], name="mm")
    shapes = {"a": ["M", "K"], "b": ["K", "N"], "c": ["M", "N"]}
    ok = PGraph([Loop("M", True, [], [Loop("N", True, [], [Loop("K", False, ["dot"], [Stmt(mm, "dot")])])])],
                inputs=["a", "b"], outputs=["c"])
    feeds = {"a": np.ones((2, 3), np.float32), "b": np.ones((3, 4), np.float32)}
    run_pgraph(ok, feeds, shapes=shapes)
    # the middle loop claims M*K (= 6) where the MatMul iterates N (= 4)
    bad = PGraph([Loop("M", True, [], [Loop("M*K", True, [], [Loop("K", False, ["dot"], [Stmt(mm, "dot")])])])],
                 inputs=["a", "b"], outputs=["c"])
    with pytest.raises(InterpreterError, match="cover 36 iterations .* is 24"):
        run_pgraph(bad, feeds, shapes=shapes)       # iteration-space check
    shapes_mk = dict(shapes, c=["M", "M*K"])        # c's axis 1 claims M*K = 6, but it is 4
    with pytest.raises(InterpreterError, match=r"loop size M\*K = 6"):
        run_pgraph(bad, feeds, shapes=shapes_mk)    # tensor-dim check (fires first)
    # an int loop size that contradicts the runtime shape
    relu = helper.make_node("Relu", ["a"], ["r"])
    with pytest.raises(InterpreterError, match="cover 3 iterations"):
        run_pgraph(PGraph([Loop(3, True, ["relu"], [Stmt(relu, "relu")])], ["a"], ["r"]), feeds)
    # a symbol bound inconsistently (b's K is 5 but a's K is 3) -- caught before MatMul runs
    with pytest.raises(InterpreterError, match="'K'"):
        run_pgraph(ok, {"a": np.ones((2, 3), np.float32), "b": np.ones((5, 4), np.float32)}, shapes=shapes)
    # a loop whose size evaluates to a non-positive int
    zero = PGraph([Loop("0*M", True, [], [Stmt(helper.make_node("Relu", ["a"], ["r"]), "relu")])],
                  inputs=["a"], outputs=["r"])
    with pytest.raises(InterpreterError, match="evaluates to 0"):
        run_pgraph(zero, feeds, shapes=shapes)


def test_written_twice_raises():
    relu = helper.make_node("Relu", ["x"], ["y"])
    pg = PGraph([Loop(3, True, [], [Stmt(relu, "relu"), Stmt(relu, "relu")])], inputs=["x"], outputs=["y"])
    with pytest.raises(InterpreterError, match="already exists"):
        run_pgraph(pg, {"x": np.ones(3, np.float32)})


def test_support_nodes_run_lazily():
    """A Reshape whose shape comes from Shape->Concat support nodes outside the tree."""
    shape = helper.make_node("Shape", ["x"], ["sx"], name="shape")
    cat = helper.make_node("Concat", ["sx", "one"], ["tgt"], axis=0, name="concat")
    resh = helper.make_node("Reshape", ["x", "tgt"], ["y"], name="reshape")
    pg = PGraph([Stmt(resh, "reshape")], inputs=["x"], outputs=["y"])
    feeds = {"x": np.ones((2, 3), np.float32)}
    out = run_pgraph(pg, feeds, {"one": np.array([1], np.int64)}, support=[cat, shape])
    assert out["y"].shape == (2, 3, 1)
    with pytest.raises(InterpreterError, match="'tgt'"):
        run_pgraph(pg, feeds, {"one": np.array([1], np.int64)})


# ---- 3. zoo models: every fused subgraph against the original model on ORT ---------------------
FAMILIES = ["bert", "albert", "gpt2", "t5", "vit", "llama"]
EXPORTERS = ["torchscript", "dynamo"]
SETTINGS = [(2, 7), (3, 5)]


def check_zoo_model(path, settings=SETTINGS):
    """(subgraphs checked, failures) for one zoo model."""
    from plus_ep.graph_rewrites.interpret import run_subgraph
    from plus_ep.rewrite import rewrite_detailed
    from plus_ep.zoo import sample_inputs
    from tests.support.subgraph_check import boundaries, with_outputs

    model = onnx.load(str(path))
    result = rewrite_detailed(model)
    view = result.view
    inits = {i.name for i in model.graph.initializer}
    graph_inputs = {i.name for i in model.graph.input}
    bounds = boundaries(result)
    wanted = list(dict.fromkeys(t for ins, outs in bounds for t in ins + outs
                                if t not in inits and t not in graph_inputs))
    sess = ort.InferenceSession(with_outputs(model, wanted).SerializeToString(),
                                providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    checked, failures = 0, []
    totals = {"statements": 0, "support": 0, "loops": 0, "loops_evaluated": 0, "dims_checked": 0,
              "spaces_checked": 0,
              "unevaluated": []}
    for batch, seq in settings:
        feeds = sample_inputs(model, batch=batch, seq=seq)
        ref = dict(zip(names, sess.run(None, feeds)))
        ref.update(feeds)
        for k, (sub, (ins, outs)) in enumerate(zip(result.subgraphs, bounds)):
            where = f"{path.name} B={batch} S={seq} subgraph {k} ({sub.pattern.name}, seed " \
                    f"{view.node_label(sub.seed)})"
            sub_feeds = {t: ref[t] for t in ins if t in ref}
            try:
                stats: dict = {}
                got = run_subgraph(result, sub, sub_feeds, stats=stats)
                for key, val in stats.items():
                    totals[key] = totals.get(key, 0 if not isinstance(val, list) else []) + val
            except Exception as exc:   # InterpreterError, or a reference-op failure: report both
                failures.append(f"{where}: {type(exc).__name__}: {exc}")
                continue
            checked += 1
            for t in outs:
                if t not in got:
                    failures.append(f"{where}: output '{t}' not produced")
                    continue
                try:
                    np.testing.assert_allclose(got[t], ref[t], atol=1e-4, rtol=1e-4)
                except AssertionError as exc:
                    failures.append(f"{where}: output '{t}' differs: {str(exc).strip().splitlines()[-3:]}")
    totals["unevaluated"] = sorted(set(map(str, totals["unevaluated"])))
    return len(result.subgraphs), checked, failures, totals


def random_settings(family, exporter, n=2):
    """Random (batch, seq) values of the symbolic dims, reproducible per model."""
    rng = np.random.default_rng(zlib.crc32(f"{family}/{exporter}".encode()))
    return [(int(rng.integers(1, 5)), int(rng.integers(2, 17))) for _ in range(n)]


@pytest.mark.zoo
@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("family", FAMILIES)
def test_zoo_subgraphs_match_ort(family, exporter):
    from tests.support.zoo_models import zoo_path
    path = zoo_path(family, exporter)          # the full-depth exports of the acceptance tests
    settings = random_settings(family, exporter)
    n_sub, checked, failures, totals = check_zoo_model(path, settings)
    print(f"{family}/{exporter}: {n_sub} subgraphs, {checked} runs checked (batch, seq in {settings}), "
          f"{len(failures)} failures; {totals}")
    assert n_sub > 0
    assert totals["dims_checked"] > 0, "the loop-size check never compared a tensor dim"
    assert not failures, "\n".join(failures[:20])


if __name__ == "__main__":      # python tests/zoo/test_interpret.py: summary over the zoo
    import sys
    import time

    from plus_ep import zoo
    for fam in sys.argv[1:] or FAMILIES:
        for ex in EXPORTERS:
            t = time.time()
            p = zoo.export(fam, ex, "small", layers=2)
            n, c, f, tot = check_zoo_model(p)
            print(f"{fam}/{ex}: {n} subgraphs, {c} runs checked, {len(f)} failures, {time.time() - t:.1f}s")
            print("   ", tot)
            for line in f[:10]:
                print("   ", line)


def test_swapped_symbolic_loop_sizes_raise():
    """Loops M and N of a GEMM swapped: same iteration count, but each axis is checked against the
    loop that iterates it."""
    m = _model([helper.make_node("MatMul", ["a", "w"], ["c"]),
                helper.make_node("Relu", ["c"], ["y"])],
               [helper.make_tensor_value_info("a", F, ["M", "K"]),
                helper.make_tensor_value_info("w", F, ["K", "N"])],
               [helper.make_tensor_value_info("y", F, ["M", "N"])])
    pg = pgraph_of_model(m)
    consts, shapes, opset = model_program(m)
    feeds = {"a": np.ones((3, 4), np.float32), "w": np.ones((4, 5), np.float32)}
    run_pgraph(pg, feeds, consts, opset=opset, shapes=shapes)
    outer, inner = pg.loops()[0], pg.loops()[0].loops()[0]
    outer.size, inner.size = inner.size, outer.size
    with pytest.raises(InterpreterError, match="axis 0 of 'a'"):
        run_pgraph(pg, feeds, consts, opset=opset, shapes=shapes)
