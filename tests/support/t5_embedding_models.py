"""T5's first RMSNorm in miniature (tests/cpu/test_bounds_fallback.py, tests/emulated/test_bounds_fallback_emulated.py):
its side kernel spills on sm_80 under the default launch bounds, as the real-size export's did."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from tests.support.graphs import Graph

D = 48


def t5_embedding_rmsnorm(vocab: int = 50) -> onnx.ModelProto:
    """T5's first RMSNorm as TorchScript exports it: Gather(embedding, ids) -> Cast -> Pow/ReduceMean/
    Add/Sqrt/Div -> Mul(weight), with the embedding and its Cast also graph outputs (a side kernel)."""
    rng = np.random.default_rng(0)
    g = Graph("t5_embedding_rmsnorm")
    g.input("ids", ["batch", "seq"], TensorProto.INT64)
    inits = {"E": rng.standard_normal((vocab, D)), "two": np.array(2.0), "eps": np.array(1e-6),
             "Wn": rng.standard_normal(D)}
    for k, a in inits.items():
        g.init(k, a.astype(np.float32))
    g.op("Gather", "E", "ids", out="emb")
    g.op("Cast", "emb", out="embc", to=TensorProto.FLOAT)
    g.op("Pow", "embc", "two", out="sq")
    g.op("ReduceMean", "sq", out="ms", axes=[-1], keepdims=1)
    g.op("Add", "ms", "eps", out="mse")
    g.op("Sqrt", "mse", out="rt")
    g.op("Div", "embc", "rt", out="nrm")
    g.op("Mul", "Wn", "nrm", out="Y")
    for n in ("Y", "emb", "embc"):
        g.output(n, ["batch", "seq", D])
    return g.model()
