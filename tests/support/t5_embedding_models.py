"""T5's first RMSNorm in miniature (tests/cpu/test_bounds_fallback.py, tests/emulated/test_bounds_fallback_emulated.py):
its side kernel spills on sm_80 under the default launch bounds, as the real-size export's did."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

D = 48


def t5_embedding_rmsnorm(vocab: int = 50) -> onnx.ModelProto:
    """T5's first RMSNorm as TorchScript exports it: Gather(embedding, ids) -> Cast -> Pow/ReduceMean/
    Add/Sqrt/Div -> Mul(weight), with the embedding and its Cast also graph outputs (a side kernel)."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Gather", ["E", "ids"], ["emb"]),
             helper.make_node("Cast", ["emb"], ["embc"], to=TensorProto.FLOAT),
             helper.make_node("Pow", ["embc", "two"], ["sq"]),
             helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[-1], keepdims=1),
             helper.make_node("Add", ["ms", "eps"], ["mse"]),
             helper.make_node("Sqrt", ["mse"], ["rt"]),
             helper.make_node("Div", ["embc", "rt"], ["nrm"]),
             helper.make_node("Mul", ["Wn", "nrm"], ["Y"])]
    inits = {"E": rng.standard_normal((vocab, D)), "two": np.array(2.0), "eps": np.array(1e-6),
             "Wn": rng.standard_normal(D)}
    out = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", "seq", D]) for n in ("Y", "emb", "embc")]
    g = helper.make_graph(nodes, "t5_embedding_rmsnorm",
                          [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])], out,
                          [numpy_helper.from_array(a.astype(np.float32), k) for k, a in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
