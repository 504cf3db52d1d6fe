"""A read-only view of an ONNX graph for the compiler: producers, consumers, shapes (symbolic dims
kept), small constants, and which nodes compute on graph-input data.

Shapes come from ONNX Runtime's symbolic shape inference (it follows Shape→Gather→Concat→Reshape
chains of TorchScript exports) run on a copy whose large initializers are replaced by typed graph
inputs, so a 400 MB model infers in a fraction of a second; onnx's own inference is the fallback.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from . import shape_fold
from .index import GraphIndex
from .ops import SHAPE_OPS

log = logging.getLogger("plus_ep.graph")

SMALL_CONST = 4096            # elements: initializers up to this size are kept by value
MAX_FOLD_ROUNDS = 4           # shape_fold rounds when inference leaves invented dims


@dataclass
class GraphView:
    model: onnx.ModelProto
    graph_index: GraphIndex | None = None                 # the one use-def index of model.graph
    nodes: list = field(default_factory=list)             # graph.node, topologically sorted
    index: list = field(default_factory=list)             # position of nodes[i] in graph.node
    producer: dict = field(default_factory=dict)          # tensor -> node index
    consumers: dict = field(default_factory=dict)         # tensor -> [node index] (implicit reads too)
    shapes: dict = field(default_factory=dict)            # tensor -> list[int|str|None] | None
    dtypes: dict = field(default_factory=dict)            # tensor -> onnx elem type
    consts: dict = field(default_factory=dict)            # tensor -> np.ndarray (small constants)
    initializers: set = field(default_factory=set)
    data: set = field(default_factory=set)                # tensors that depend on graph-input data
    outputs: set = field(default_factory=set)             # graph outputs

    # ------------------------------------------------------------------------------------------
    @classmethod
    def build(cls, model: onnx.ModelProto, infer: bool = True) -> "GraphView":
        g = model.graph
        for n in g.node:
            for a in n.attribute:
                if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                    log.debug("node %s has a subgraph attribute; it stays unfused", n.name)
        ix = GraphIndex(g)             # positions in GraphView are the index's positions
        view = cls(model=model, graph_index=ix, nodes=ix.nodes, index=ix.order,
                   producer=ix.producer, consumers=ix.consumers)
        view.outputs = {o.name for o in g.output}
        for init in g.initializer:
            view.initializers.add(init.name)
            view.dtypes[init.name] = init.data_type
            view.shapes[init.name] = list(init.dims)
            if int(np.prod(init.dims)) <= SMALL_CONST and not init.external_data:
                view.consts[init.name] = numpy_helper.to_array(init)
        for n in view.nodes:
            if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
                arr = shape_fold.constant_value(n)
                if arr is not None:
                    view.consts[n.output[0]] = arr
        if infer:
            view._infer_shapes()
        view._classify_data()
        return view

    # ------------------------------------------------------------------------------------------
    def _infer_shapes(self):
        light = _strip_weights(self.model)
        _parenthesize_dims(light)
        inferred = _infer(light)
        for _ in range(MAX_FOLD_ROUNDS):    # dims inference invented: fold static shape arithmetic, infer again
            if inferred is light or _dims_from_inputs(inferred):
                break
            consts = shape_fold.fold(light, inferred)
            if not consts:
                break
            light = shape_fold.with_constants(light, consts)
            again = _infer(light)
            if again is light:
                break
            inferred = again
            for t, v in consts.items():
                self.dtypes.setdefault(t, numpy_helper.from_array(np.asarray(v)).data_type)
                self.shapes[t] = list(np.shape(v))
                if v.dtype.kind in "iub" and v.size <= SMALL_CONST:
                    self.consts.setdefault(t, v)
        g = inferred.graph
        for vi in list(g.input) + list(g.output) + list(g.value_info):
            tt = vi.type.tensor_type
            if not vi.type.HasField("tensor_type"):
                continue
            self.dtypes[vi.name] = tt.elem_type
            if tt.HasField("shape"):
                self.shapes[vi.name] = [_dim(d) for d in tt.shape.dim]
            else:
                self.shapes.setdefault(vi.name, None)

    def _classify_data(self):
        g = self.model.graph
        self.data = {i.name for i in g.input if i.name not in self.initializers}
        for n in self.nodes:
            if n.op_type in SHAPE_OPS:
                continue
            if any(t in self.data for t in n.input if t):
                self.data.update(t for t in n.output if t)

    # ------------------------------------------------------------------------------------------
    def is_data_node(self, i: int) -> bool:
        n = self.nodes[i]
        return n.op_type not in SHAPE_OPS and any(t in self.data for t in n.input if t)

    def shape(self, t: str):
        return self.shapes.get(t)

    def const(self, t: str):
        return self.consts.get(t)

    def node_label(self, i: int) -> str:
        return self.graph_index.label(i)


def _infer(light: onnx.ModelProto) -> onnx.ModelProto:
    """Shapes of `light`: onnx's inference when its dims all come from the input symbols, else ORT's symbolic
    inference, else onnx's whatever it gives; `light` itself when everything failed."""
    inferred = None
    try:   # fast path: onnx's inference, kept when every dim is built from the input symbols
        quick = onnx.shape_inference.infer_shapes(light, data_prop=True)
        if _dims_from_inputs(quick):
            inferred = quick
    except Exception as exc:
        log.debug("onnx shape inference failed: %s", exc)
    if inferred is None:
        try:   # follows Shape->Gather->Concat->Reshape chains of TorchScript exports
            inferred = _ort_symbolic_shapes(light)
        except Exception as exc:  # unknown ops, custom domains
            log.debug("symbolic shape inference failed (%s); using onnx shape inference", exc)
    if inferred is None:
        try:
            inferred = onnx.shape_inference.infer_shapes(light, data_prop=True)
        except Exception as exc:
            log.warning("shape inference failed: %s; loop sizes will be symbolic", exc)
            inferred = light
    return inferred


def _dim(d) -> int | str | None:
    if d.HasField("dim_value"):
        return int(d.dim_value)
    if d.HasField("dim_param") and d.dim_param:
        return d.dim_param.replace(" ", "")
    return None


_INVENTED = re.compile(r"_o\d+__d\d+")      # ORT's name for a dim it made up for an unknown output


def _ort_symbolic_shapes(light: onnx.ModelProto):
    """ORT's symbolic shape inference (its infer_shapes, minus the temp file it writes on failure,
    and with unknown Split sizes left unknown rather than assumed equal) with auto_merge, which
    TorchScript exports need ('Min(512, seq)' merged into 'seq'). When a merge involves a dim ORT
    invented for an output it could not infer ('ReduceMean_10_o0__d0': ReduceMean over computed
    axes), the merge is a guess: that dim may be 1 at run time and broadcast, yet it becomes the dim
    it met (ORT's own warning); inference then runs again without auto_merge. None when inference
    is incomplete."""
    from onnxruntime.tools import symbolic_shape_infer as ssi

    if (ssi.get_opset(light) or 0) < 7:          # what ORT's infer_shapes refuses
        return None

    class Inference(ssi.SymbolicShapeInference):
        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            self.dispatcher_.setdefault("Flatten", self._infer_Flatten)

        def _infer_Flatten(self, node):  # noqa: N802
            # not in ORT's table: its fallback invents both dims ('Flatten_82_o0__d1'), which no fused
            # node can bind; the output is [prod(dims[:axis]), prod(dims[axis:])]
            shape = self._get_sympy_shape(node, 0)
            axis = ssi.get_attribute(node, "axis", 1)
            axis = axis + len(shape) if axis < 0 else axis        # 0 <= axis <= rank
            dims = [ssi.sympy_reduce_product(shape[:axis]), ssi.sympy_reduce_product(shape[axis:])]
            dtype = self.known_vi_[node.input[0]].type.tensor_type.elem_type
            vi = self.known_vi_[node.output[0]]
            vi.CopyFrom(onnx.helper.make_tensor_value_info(node.output[0], dtype,
                                                           ssi.get_shape_from_sympy_shape(dims)))

        def _infer_Split_Common(self, node, make_value_info):  # noqa: N802
            # ORT assumes an equal split when the `split` input's values are unknown: sizes unknown
            if ssi.get_opset(self.out_mp_) < 13 or len(node.input) < 2 or not node.input[1] \
                    or self._try_get_value(node, 1) is not None:
                return super()._infer_Split_Common(node, make_value_info)
            shape = self._get_sympy_shape(node, 0)
            axis = ssi.handle_negative_axis(ssi.get_attribute(node, "axis", 0), len(shape))
            dtype = self.known_vi_[node.input[0]].type.tensor_type.elem_type
            for k, t in enumerate(node.output):
                dims = [*shape[:axis], self._new_symbolic_dim_from_output(node, k, axis), *shape[axis + 1:]]
                vi = self.known_vi_[t]
                vi.CopyFrom(make_value_info(t, dtype, ssi.get_shape_from_sympy_shape(dims)))
                self.known_vi_[vi.name] = vi

    def run(auto_merge):
        sym = Inference(2**31 - 1, auto_merge, True, 0)
        complete = False
        sym._preprocess(light)
        while sym.run_:
            complete = sym._infer_impl()
        sym._update_output_from_vi()
        return (sym.out_mp_ if complete else None), sym.suggested_merge_

    out, merges = run(True)
    guessed = [f"{k}->{v}" for k, v in merges.items() if _INVENTED.search(str(k)) or _INVENTED.search(str(v))]
    if out is not None and guessed:
        log.debug("symbolic shape inference merged invented dims (%s); redone without auto_merge",
                  ", ".join(guessed[:5]))
        out, _ = run(False)
    return out


def _parenthesize_dims(model) -> None:
    """Declared dims that are expressions (Optimum's `past_sequence_length + sequence_length`) wrapped in
    parentheses, in place: both shape inferences build products by joining dim names with `*`, which
    would read `batch*past+seq` for a Flatten of [batch, past+seq]."""
    g = model.graph
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        for d in vi.type.tensor_type.shape.dim:
            p = d.dim_param
            if p and not p.isidentifier() and not (p.startswith("(") and p.endswith(")")):
                d.dim_param = f"({p})"


def _dims_from_inputs(model) -> bool:
    """Every node output has a full shape whose symbols are graph-input symbols."""
    g = model.graph
    symbols = {d.dim_param for i in g.input for d in i.type.tensor_type.shape.dim if d.dim_param}
    infos = {v.name: v for v in list(g.value_info) + list(g.output)}
    for n in g.node:
        for t in n.output:
            vi = infos.get(t)
            if not t:
                continue
            if vi is None or not vi.type.tensor_type.HasField("shape"):
                return False
            for d in vi.type.tensor_type.shape.dim:
                if d.HasField("dim_value"):
                    continue
                parts = [p for p in d.dim_param.replace(" ", "").split("*") if not p.isdigit()]
                if not d.dim_param or any(p not in symbols for p in parts):
                    return False
    return True


def _strip_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """Copy of the model whose large initializers are typed graph inputs (values not needed)."""
    src = model.graph
    g = onnx.GraphProto(name=src.name, node=src.node, input=src.input, output=src.output,
                        value_info=src.value_info)
    for init in src.initializer:
        if int(np.prod(init.dims)) > SMALL_CONST or init.external_data:
            g.input.append(onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
        else:
            g.initializer.append(init)
    light = onnx.ModelProto(ir_version=model.ir_version, opset_import=model.opset_import,
                            functions=model.functions, graph=g)
    return light
