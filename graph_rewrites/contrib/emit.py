"""The emitter every contrib expansion writes with: standard-ONNX nodes named under the contrib node,
opset-aware spellings of the ops whose form changed (Unsqueeze/Reduce* axes, LayerNormalization, Gelu),
and typed constants.

An expansion sees the model only through a `Facts` (dtype, shape, constant value of a tensor), so the
same code expands a node of a model file (facts from shape inference) and a node the +Graph
interpreter runs on arrays (facts from the arrays)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MS_DOMAIN = "com.microsoft"
FLOATS = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE)
MARK = "plus_ep"            # every name an expansion creates contains "/plus_ep/"
_BOOL_OPS = frozenset({"Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Equal", "And", "Or", "Not", "Xor",
                       "IsNaN", "IsInf"})
_INT64_OPS = frozenset({"Shape", "Size", "NonZero", "ArgMax", "ArgMin"})


class Refused(Exception):
    """The contrib node stays opaque; the message says why (shown by `plus-ep explain`)."""


@dataclass
class Facts:
    """What an expansion may know about the tensors around a node. ``shared``: expansion-wide memo so
    that nodes reading the same tensors (every Attention of a BERT reads one mask index) share the
    nodes derived from them (one additive mask, one set of cache indices)."""
    dtype: dict = field(default_factory=dict)      # tensor -> onnx elem type
    shape: dict = field(default_factory=dict)      # tensor -> [int | str | None] | None
    const: dict = field(default_factory=dict)      # tensor -> np.ndarray (initializers, Constant nodes)
    opset: int = 17
    shared: dict = field(default_factory=dict)     # memo key -> tensor name (made by an earlier expansion)
    shared_nodes: dict = field(default_factory=dict)   # tensor name -> the Emitter group that made it
    declared: dict = field(default_factory=dict)   # graph input/output -> its shape as the model declares it
    producer: dict = field(default_factory=dict)   # tensor -> the model node writing it (what a fold looks through)

    def rank(self, t):
        s = self.shape.get(t)
        return None if s is None else len(s)

    def dim(self, t, axis):
        """A static dim of `t` (int) or None."""
        s = self.shape.get(t)
        if s is None or not -len(s) <= axis < len(s):
            return None
        d = s[axis]
        return int(d) if isinstance(d, (int, np.integer)) else None


def np_dtype(elem_type: int):
    return helper.tensor_dtype_to_np_dtype(elem_type)


class Emitter:
    """Standard nodes computing one contrib node. Tensor and node names: ``<base>/plus_ep/<k>_<op>``
    with base the node's name (or first output), so they never collide with the model's."""

    def __init__(self, node: onnx.NodeProto, facts: Facts):
        self.node, self.facts, self.opset = node, facts, facts.opset
        self.base = f"{node.name or node.output[0]}/{MARK}"
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.made: set[str] = set()          # tensors produced by this expansion's own nodes
        self.uses_shared: set[str] = set()   # tensors produced by another expansion's shared nodes
        self.one_const: dict | None = None   # {(dtype, shape, bytes): name}: equal constants as one initializer

    # ---- names and nodes --------------------------------------------------------------------------
    def fresh(self, what: str) -> str:
        return f"{self.base}/{len(self.nodes) + len(self.inits)}_{what}"

    def op(self, op_type: str, *inputs, out=None, n_out: int = 1, **attrs):
        """Append one node; returns its output name (a list when n_out > 1)."""
        if out is None:
            outs = [self.fresh(op_type) for _ in range(n_out)]
        else:
            outs = [out] if isinstance(out, str) else list(out)
        name = f"{self.base}/n{len(self.nodes)}_{op_type}"
        self.nodes.append(helper.make_node(op_type, [i or "" for i in inputs], outs, name=name,
                                           **{k: v for k, v in attrs.items() if v is not None}))
        self.made.update(o for o in outs if o)
        dt = self._out_type(op_type, inputs, attrs)
        if dt is not None:
            for o in outs:
                self.facts.dtype.setdefault(o, dt)
        for i in inputs:
            if i in self.facts.shared_nodes:
                self.uses_shared.add(i)
        return outs[0] if len(outs) == 1 else outs

    def _out_type(self, op_type, inputs, attrs):
        """The element type of a new node's outputs (what an expansion asks about: float or not)."""
        if op_type == "Cast":
            return attrs["to"]
        if op_type in _BOOL_OPS:
            return TensorProto.BOOL
        if op_type in _INT64_OPS:
            return TensorProto.INT64
        if op_type == "MatMulInteger":
            return TensorProto.INT32
        if op_type == "QuantizeLinear":
            zp = inputs[2] if len(inputs) > 2 and inputs[2] else None
            return self.facts.dtype.get(zp) if zp else (attrs.get("output_dtype") or TensorProto.UINT8)
        if op_type == "DequantizeLinear":
            return attrs.get("output_dtype") or self.facts.dtype.get(inputs[1])
        data = inputs[1] if op_type == "Where" else (inputs[0] if inputs else None)
        return self.facts.dtype.get(data) if data else None

    def const(self, value, dtype=None) -> str:
        """An initializer holding `value` (np.ndarray kept as is; a Python number/list as `dtype`)."""
        arr = np.asarray(value, dtype=np_dtype(dtype) if dtype is not None else None)
        key = (arr.dtype.str, arr.shape, arr.tobytes())
        if self.one_const is not None and key in self.one_const:
            return self.one_const[key]
        name = self.fresh("c")
        if self.one_const is not None:
            self.one_const[key] = name
        self.inits.append(numpy_helper.from_array(arr, name))
        self.facts.const[name] = arr
        self.facts.dtype[name] = helper.np_dtype_to_tensor_dtype(arr.dtype)
        self.facts.shape[name] = list(arr.shape)
        return name

    def ints(self, values) -> str:
        return self.const(np.asarray(values, dtype=np.int64))

    def scalar(self, value, dtype: int) -> str:
        return self.const(np.asarray(value, dtype=np_dtype(dtype)))

    def shared(self, key, make):
        """The tensor `make()` builds, built once per model for `key` and reused by later expansions."""
        hit = self.facts.shared.get(key)
        if hit is not None:
            self.uses_shared.add(hit)
            return hit
        start = len(self.nodes)
        t = make()
        self.facts.shared[key] = t
        for n in self.nodes[start:]:
            for o in n.output:
                self.facts.shared_nodes[o] = n
        return t

    # ---- opset-aware spellings --------------------------------------------------------------------
    def unsqueeze(self, x, axes):
        if self.opset >= 13:
            return self.op("Unsqueeze", x, self.ints(axes))
        return self.op("Unsqueeze", x, axes=list(axes))

    def reduce(self, op_type, x, axes, keepdims=1):
        axis_input = self.opset >= 18 or (op_type == "ReduceSum" and self.opset >= 13)
        if axis_input:
            return self.op(op_type, x, self.ints(axes), keepdims=keepdims)
        return self.op(op_type, x, axes=list(axes), keepdims=keepdims)

    def slice(self, x, start, end, axis):
        return self.op("Slice", x, self.ints([start]), self.ints([end]), self.ints([axis]))

    def cast(self, x, to: int, src: int | None = None):
        if src is not None and src == to:
            return x
        return self.op("Cast", x, to=to)

    def dim_of(self, x, axis: int) -> str:
        """A 1-element int64 tensor holding x.shape[axis]."""
        return self.op("Gather", self.op("Shape", x), self.ints([axis]), axis=0)

    def dim_scalar(self, x, axis: int) -> str:
        """x.shape[axis] as a rank-0 int64 tensor (the form shape inference follows into Range)."""
        return self.op("Gather", self.op("Shape", x), self.ints(axis), axis=0)

    def reshape(self, x, dims) -> str:
        """Reshape to `dims`: ints (0 copies, -1 infers) or 1-element int64 tensors, concatenated."""
        if all(isinstance(d, (int, np.integer)) for d in dims):
            return self.op("Reshape", x, self.ints([int(d) for d in dims]))
        parts = [d if isinstance(d, str) else self.ints([int(d)]) for d in dims]
        return self.op("Reshape", x, self.op("Concat", *parts, axis=0))

    # ---- checks -----------------------------------------------------------------------------------
    def need_float(self, t) -> int:
        dt = self.facts.dtype.get(t)
        if dt not in FLOATS:
            raise Refused(f"input '{t}' has element type {onnx.TensorProto.DataType.Name(dt) if dt else 'unknown'}; "
                          "expansions cover float, float16, bfloat16 and double")
        return dt


def attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def inp(node, k) -> str | None:
    """Input k of a node, or None when it is absent (missing or the empty name)."""
    return node.input[k] if len(node.input) > k and node.input[k] else None


def out(node, k) -> str | None:
    return node.output[k] if len(node.output) > k and node.output[k] else None
