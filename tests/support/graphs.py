"""Small ONNX test graphs in a few lines: the one builder tests use instead of writing
helper.make_node / make_graph / make_model by hand.

    g = Graph("gemm_gelu")                              # opset 17, IR version 9 unless given
    x = g.input("X", ["B", "S", 64])                    # float32 unless dtype=...
    w = g.init("W", rng.standard_normal((64, 32)).astype(np.float32))   # an initializer from an array
    y = g.op("MatMul", x, w)                            # one output, named t<k> unless out="..." is given
    g.op("Gelu", y, out="Y", domain="com.microsoft", name="gelu")
    g.output("Y", ["B", "S", 32])                       # or g.model(["Y"]): float32, shape unknown
    model = g.model()

`op` takes attributes as keywords and `outs=[...]` for several outputs (it returns their names);
"" as an input is an absent optional input. Nodes, inputs, initializers and outputs keep the order
they were added in, so a model written with this builder is the one the same calls to onnx.helper
would give.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Graph:
    def __init__(self, name: str = "g", opset: int = 17, ir_version: int | None = 9, domains: dict | None = None):
        self.name, self.opset, self.ir_version = name, opset, ir_version
        self.domains = dict(domains or {})           # extra opset imports: {"com.microsoft": 1}
        self.nodes, self.inputs, self.outputs, self.inits, self.value_info = [], [], [], [], []

    def input(self, name: str, dims, dtype=TensorProto.FLOAT) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, dtype, None if dims is None else list(dims)))
        return name

    def output(self, name: str, dims=None, dtype=TensorProto.FLOAT) -> str:
        self.outputs.append(helper.make_tensor_value_info(name, dtype, None if dims is None else list(dims)))
        return name

    def init(self, name: str, value) -> str:
        """An initializer from a numpy array (its dtype and shape) or a TensorProto."""
        t = value if isinstance(value, onnx.TensorProto) else numpy_helper.from_array(np.asarray(value), name)
        if t.name != name:
            t.name = name
        self.inits.append(t)
        return name

    def op(self, op_type: str, *inputs, out: str | None = None, outs=None, name: str | None = None,
           domain: str | None = None, **attrs):
        """Add a node; returns its output name (or the list of `outs`)."""
        names = list(outs) if outs is not None else [out if out is not None else f"t{len(self.nodes)}"]
        kw = {"name": name} if name is not None else {}
        if domain is not None:
            kw["domain"] = domain
            self.domains.setdefault(domain, 1)
        self.nodes.append(helper.make_node(op_type, list(inputs), names, **kw, **attrs))
        return names if outs is not None else names[0]

    def graph(self, outputs=None) -> onnx.GraphProto:
        outs = list(self.outputs) + [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                                     for o in ([outputs] if isinstance(outputs, str) else outputs or [])]
        return helper.make_graph(self.nodes, self.name, self.inputs, outs, self.inits, value_info=self.value_info)

    def model(self, outputs=None, check: bool = False) -> onnx.ModelProto:
        """The model; `outputs`: more output names (float32, shape unknown) after those of output()."""
        ops = [helper.make_opsetid("", self.opset)] + [helper.make_opsetid(d, v) for d, v in self.domains.items()]
        kw = {"ir_version": self.ir_version} if self.ir_version is not None else {}
        m = helper.make_model(self.graph(outputs), opset_imports=ops, **kw)
        if check:
            onnx.checker.check_model(m, full_check=True)
        return m
