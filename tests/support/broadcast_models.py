"""Models whose dims the rewrite takes as equal but ONNX broadcasts at run time (size 1 against N), and
feeds for them: issue 37's `Concat(p, q) + z` and `x + z`, a GEMM epilogue's residual, LayerNorm and
Softmax over a sum with a broadcasting operand. Each model's declared dims name different symbols (or
the same one); ONNX Runtime's shape inference merges them, the run keeps them apart. Among the feeds,
0 against 1: ONNX broadcasts to 0 (an empty output), not to the larger dim.

    m = MODELS["concat_add"]()
    feeds = FEEDS["concat_add"]        # [(name, {input: array})]: ORT CPU runs some, refuses others
"""
from __future__ import annotations

import numpy as np

from tests.support.graphs import Graph

H = 64


def _rng(seed=0):
    return np.random.default_rng(seed)


def add(same_symbol: bool = False):
    """Y = Relu(x + z), x [b, s, 64], z [b, t, 64] (or [b, s, 64])."""
    g = Graph("bc_add")
    g.input("x", ["b", "s", H])
    g.input("z", ["b", "s" if same_symbol else "t", H])
    g.op("Add", "x", "z", out="a")
    g.op("Relu", "a", out="Y")
    g.output("Y")
    return g.model()


def concat_add():
    """Y = Relu(Concat(p, q, axis=1) + z): the Concat's n + m merged into z's t by shape inference."""
    g = Graph("bc_concat")
    g.input("p", ["b", "n", H])
    g.input("q", ["b", "m", H])
    g.input("z", ["b", "t", H])
    g.op("Concat", "p", "q", out="c", axis=1)
    g.op("Add", "c", "z", out="a")
    g.op("Relu", "a", out="Y")
    g.output("Y")
    return g.model()


def gemm_concat(k: int = 32):
    """Y = X @ W + Concat(p, q, axis=1): X's t binds the GEMM's rows, the Concat's n + m is t only by the
    rewrite's assumption (an `equal` record; without it the epilogue reads q past its end when t > n + m).
    Where one side is 1 ONNX Runtime broadcasts a computed operand, which these kernels refuse."""
    rng = _rng(3)
    g = Graph("bc_gemm_concat")
    g.input("X", ["b", "t", k])
    g.input("p", ["b", "n", H])
    g.input("q", ["b", "m", H])
    g.init("W", (rng.standard_normal((k, H)) / np.sqrt(k)).astype(np.float32))
    g.op("MatMul", "X", "W", out="mm")
    g.op("Concat", "p", "q", out="c", axis=1)
    g.op("Add", "mm", "c", out="Y")
    g.output("Y")
    return g.model()


def gemm_residual(k: int = 32):
    """Y = Relu(X @ W + B + R): a GEMM epilogue whose residual R [b, s, 64] may broadcast."""
    rng = _rng(1)
    g = Graph("bc_gemm")
    g.input("X", ["b", "s", k])
    g.input("R", ["b", "s", H])
    g.init("W", (rng.standard_normal((k, H)) / np.sqrt(k)).astype(np.float32))
    g.init("B", rng.standard_normal(H).astype(np.float32))
    g.op("MatMul", "X", "W", out="mm")
    g.op("Add", "mm", "B", out="biased")
    g.op("Add", "biased", "R", out="res")
    g.op("Relu", "res", out="Y")
    g.output("Y")
    return g.model()


def layernorm_sum():
    """Y = LayerNorm(x + z) over the last axis, z [b, s, 64] may broadcast along b and s."""
    rng = _rng(2)
    g = Graph("bc_ln")
    g.input("x", ["b", "s", H])
    g.input("z", ["b", "s", H])
    g.init("gamma", rng.standard_normal(H).astype(np.float32))
    g.init("beta", rng.standard_normal(H).astype(np.float32))
    g.op("Add", "x", "z", out="a")
    g.op("LayerNormalization", "a", "gamma", "beta", out="Y", axis=-1, epsilon=1e-5)
    g.output("Y")
    return g.model()


def softmax_sum():
    """Y = Softmax(x + m, axis=-1), m [b, s, k] may broadcast along every axis (a mask [b, 1, k], [b, s, 1])."""
    g = Graph("bc_softmax")
    g.input("x", ["b", "s", "k"])
    g.input("m", ["b", "s", "k"])
    g.op("Add", "x", "m", out="a")
    g.op("Softmax", "a", out="Y", axis=-1)
    g.output("Y")
    return g.model()


MODELS = {"add": add, "add_same": lambda: add(True), "concat_add": concat_add, "gemm_concat": gemm_concat,
          "gemm_residual": gemm_residual,
          "layernorm_sum": layernorm_sum, "softmax_sum": softmax_sum}


def _f(*shape, seed=0):
    return _rng(seed).standard_normal(shape).astype(np.float32)


def _pair(a, b, names=("x", "z")):
    return {names[0]: _f(*a, seed=1), names[1]: _f(*b, seed=2)}


_ADD = [("z along s", _pair((2, 8, H), (2, 1, H))), ("x along s", _pair((2, 1, H), (2, 8, H))),
        ("x along b", _pair((1, 8, H), (2, 8, H))), ("both ways", _pair((1, 8, H), (2, 1, H))),
        ("equal", _pair((2, 8, H), (2, 8, H))), ("3 against 8", _pair((2, 8, H), (2, 3, H))),
        ("0 rows against 1", _pair((2, 0, H), (2, 1, H))), ("1 batch against 0", _pair((1, 8, H), (0, 8, H)))]

FEEDS = {
    "add": _ADD,
    "add_same": _ADD,
    "concat_add": [
        ("z along t", {"p": _f(2, 3, H, seed=1), "q": _f(2, 5, H, seed=2), "z": _f(2, 1, H, seed=3)}),
        ("z along b and t", {"p": _f(2, 3, H, seed=1), "q": _f(2, 5, H, seed=2), "z": _f(1, 1, H, seed=3)}),
        ("equal", {"p": _f(2, 3, H, seed=1), "q": _f(2, 5, H, seed=2), "z": _f(2, 8, H, seed=3)}),
        ("3 against 8", {"p": _f(2, 3, H, seed=1), "q": _f(2, 5, H, seed=2), "z": _f(2, 3, H, seed=3)}),
        ("9 against 8", {"p": _f(2, 3, H, seed=1), "q": _f(2, 5, H, seed=2), "z": _f(2, 9, H, seed=3)}),
        ("Concat over batch 1 against z's 2 (refused)",
         {"p": _f(1, 3, H, seed=1), "q": _f(1, 5, H, seed=2), "z": _f(2, 8, H, seed=3)}),
    ],
    "gemm_concat": [
        ("equal", {"X": _f(2, 8, 32, seed=1), "p": _f(2, 3, H, seed=2), "q": _f(2, 5, H, seed=3)}),
        ("9 against 8", {"X": _f(2, 9, 32, seed=1), "p": _f(2, 3, H, seed=2), "q": _f(2, 5, H, seed=3)}),
        ("7 against 8", {"X": _f(2, 7, 32, seed=1), "p": _f(2, 3, H, seed=2), "q": _f(2, 5, H, seed=3)}),
        ("GEMM over 1 row (refused)", {"X": _f(2, 1, 32, seed=1), "p": _f(2, 3, H, seed=2), "q": _f(2, 5, H, seed=3)}),
    ],
    "gemm_residual": [
        ("R along s", {"X": _f(2, 8, 32, seed=1), "R": _f(2, 1, H, seed=2)}),
        ("R along b", {"X": _f(2, 8, 32, seed=1), "R": _f(1, 8, H, seed=2)}),
        ("R one row", {"X": _f(3, 5, 32, seed=1), "R": _f(1, 1, H, seed=2)}),
        ("equal", {"X": _f(2, 8, 32, seed=1), "R": _f(2, 8, H, seed=2)}),
        ("3 against 8", {"X": _f(2, 8, 32, seed=1), "R": _f(2, 3, H, seed=2)}),
    ],
    "layernorm_sum": [("z along s", _pair((2, 8, H), (2, 1, H))), ("z along b", _pair((2, 8, H), (1, 8, H))),
                      ("x along s", _pair((2, 1, H), (2, 8, H))), ("3 against 8", _pair((2, 8, H), (2, 3, H))),
                      ("z 0 rows against 1", _pair((2, 1, H), (2, 0, H)))],
    "softmax_sum": [("mask [b, 1, k]", _pair((2, 5, 40), (2, 1, 40), ("x", "m"))),
                    ("mask [b, s, 1]", _pair((2, 5, 40), (2, 5, 1), ("x", "m"))),
                    ("mask [1, 1, k]", _pair((2, 5, 40), (1, 1, 40), ("x", "m"))),
                    ("x [b, 1, k]", _pair((2, 1, 40), (2, 5, 40), ("x", "m"))),
                    ("7 against 5", _pair((2, 5, 40), (2, 7, 40), ("x", "m"))),
                    ("mask 0 rows against 1", _pair((2, 1, 40), (2, 0, 40), ("x", "m"))),
                    ("x [b, s, 0] against 1", _pair((2, 5, 0), (2, 5, 1), ("x", "m")))],
}
