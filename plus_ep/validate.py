"""Reading a model and checking it before any compiler pass: unreadable files, external data, and
structural problems (undefined tensors, dims and data that disagree, impossible shapes, opsets) are one
ModelError naming the tensor and, where one is involved, the node."""
from __future__ import annotations

import logging
import math
import os
import stat

import onnx
from onnx import numpy_helper

from .graph_rewrites.index import ModelError

log = logging.getLogger("plus_ep")


def load_model(model) -> onnx.ModelProto:
    """A ModelProto from a proto, bytes or a path; unreadable input raises ModelError (one line)."""
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):
        data, where = bytes(model), "<bytes>"
    else:
        where = os.fspath(model)
        if not os.path.exists(where):
            raise ModelError(f"{where}: no such file")
        if os.path.isdir(where):
            raise ModelError(f"{where}: is a directory, not an ONNX model file")
        mode = os.stat(where).st_mode
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
            raise ModelError(f"{where}: is a device, not an ONNX model file")
        if stat.S_ISREG(mode) and os.path.getsize(where) >= 2**31:
            raise ModelError(f"{where}: {os.path.getsize(where) / 2**30:.1f} GiB, more than one ONNX protobuf "
                             "can hold (2 GiB); larger models keep their weights in external data files")
        with open(where, "rb") as f:
            data = f.read()
    try:
        proto = onnx.load_model_from_string(data)
    except Exception as exc:
        raise ModelError(f"{where}: not an ONNX model ({type(exc).__name__}: {str(exc)[:120]})") from None
    if not proto.HasField("graph") or not proto.graph.node:
        raise ModelError(f"{where}: not an ONNX model (no graph nodes); is the file truncated?")
    if not isinstance(model, (bytes, bytearray)):
        _load_external_data(proto, where)
    return proto


def _load_external_data(proto: onnx.ModelProto, where: str) -> None:
    """Read the tensors a model file keeps in external files; a missing, unsafe or short file is a
    ModelError naming the file and the first tensor stored in it."""
    base = os.path.dirname(os.path.abspath(where))
    external = [t for t in proto.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    if not external:
        return
    seen = set()
    for t in external:
        location = next((e.value for e in t.external_data if e.key == "location"), None)
        if location in seen:
            continue
        seen.add(location)
        if not location:
            raise ModelError(f"{where}: initializer '{t.name}' is marked external but names no data file")
        path = os.path.join(base, location)
        if not os.path.isfile(path):
            raise ModelError(f"{where}: external data file '{location}' ({path}) of initializer '{t.name}' "
                             "does not exist; keep it next to the model")
    try:
        onnx.load_external_data_for_model(proto, base)
    except Exception as exc:  # noqa: BLE001 - onnx raises ValueError, ValidationError, OSError here
        files = ", ".join(f"'{s}'" for s in sorted(seen))
        raise ModelError(f"{where}: cannot read the external data in {files}: "
                         f"{' '.join(str(exc).split())[:300]}") from None


# ---- structural checks ----
INT64_MAX = 2**63 - 1
MIN_OPSET = 7          # numpy-style broadcasting; ONNX Runtime's oldest supported default-domain opset
_BITS = {1: 32, 2: 8, 3: 8, 4: 16, 5: 16, 6: 32, 7: 64, 9: 8, 10: 16, 11: 64, 12: 32, 13: 64, 14: 64,
         15: 128, 16: 16, 17: 8, 18: 8, 19: 8, 20: 8, 21: 4, 22: 4, 23: 4, 24: 8, 25: 2, 26: 2}
_INT32_FIELD = {2, 3, 4, 5, 6, 9, 10, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26}


def _typed_values(t: onnx.TensorProto, count: int):
    """(values held, values expected) of a tensor stored in its typed field, or None if unknown."""
    dt = t.data_type
    if dt == onnx.TensorProto.STRING:
        return len(t.string_data), count
    if dt in (1, 14):
        return len(t.float_data), count * (2 if dt == 14 else 1)
    if dt in (11, 15):
        return len(t.double_data), count * (2 if dt == 15 else 1)
    if dt == 7:
        return len(t.int64_data), count
    if dt in (12, 13):
        return len(t.uint64_data), count
    if dt in _INT32_FIELD:
        per = {4: 2, 2: 4}.get(_BITS[dt], 1)
        return len(t.int32_data), -(-count // per)
    return None


def tensor_problem(t: onnx.TensorProto) -> str | None:
    """Why a tensor's dims and data disagree (negative or overflowing dims, missing or short data)."""
    dims = [int(d) for d in t.dims]
    if any(d < 0 for d in dims):
        return f"has a negative dim: {dims}"
    count = math.prod(dims)
    if count > INT64_MAX:
        return f"has dims {dims}: {count} elements overflow int64"
    if t.data_location == onnx.TensorProto.EXTERNAL or count == 0:
        return None
    if t.raw_data:
        bits = _BITS.get(t.data_type)
        if bits is not None and len(t.raw_data) != -(-count * bits // 8):
            return (f"has dims {dims} ({count} elements, {-(-count * bits // 8)} bytes) "
                    f"but holds {len(t.raw_data)} bytes of data")
        return None
    held = _typed_values(t, count)
    if held is not None and held[0] != held[1]:
        return f"has dims {dims} ({count} elements) but holds {held[0]} values" + (
            "; is its data missing?" if held[0] == 0 else "")
    return None


def _node_label(n) -> str:
    return f"{n.op_type} node '{n.name or (n.output[0] if n.output else '?')}'"


def _shape_constant(name, inits, constants):
    t = inits.get(name)
    if t is None:
        t = constants.get(name)
    if t is None or len(t.dims) != 1 or t.dims[0] > 64 or tensor_problem(t):
        return None
    try:
        return [int(v) for v in numpy_helper.to_array(t).reshape(-1)]
    except Exception:  # noqa: BLE001
        return None


# ------------------------------------------------------------------------- what onnxruntime loads
_RUNTIME_LIMITS: list = []
# element types newer than IR 8, with the IR version that introduced them (onnx's IR changelog): a model
# holding one cannot go below that IR
TYPE_IR = {onnx.TensorProto.FLOAT8E4M3FN: 9, onnx.TensorProto.FLOAT8E4M3FNUZ: 9, onnx.TensorProto.FLOAT8E5M2: 9,
           onnx.TensorProto.FLOAT8E5M2FNUZ: 9, onnx.TensorProto.UINT4: 10, onnx.TensorProto.INT4: 10,
           onnx.TensorProto.FLOAT4E2M1: 11, 24: 12, 25: 13, 26: 13, 27: 14, 28: 14}   # FLOAT8E8M0, [U]INT2, FLOAT6*
FUNCTION_OVERLOAD_IR = 10     # model-local functions with an overload field (graph_rewrites/fuse.py writes them)


def runtime_limits() -> tuple[int, int]:
    """(highest IR version, highest default-domain opset) the installed onnxruntime loads, probed once per
    process with a one-node model (a few milliseconds per try). The one probe: `plus-ep verify` refuses
    what it cannot load, `rewrite` writes an IR it can (`for_runtime`)."""
    if _RUNTIME_LIMITS:
        return _RUNTIME_LIMITS[0]
    import onnxruntime as ort
    from onnx import TensorProto, helper

    def loads(ir: int, opset: int) -> bool:
        g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "probe",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir)
        try:
            ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
            return True
        except Exception:  # noqa: BLE001 - any refusal means "not loadable"
            return False
    ir = next((v for v in range(onnx.IR_VERSION + 2, 3, -1) if loads(v, 13)), 3)
    opset = next((v for v in range(onnx.defs.onnx_opset_version() + 2, 6, -1) if loads(min(ir, 10), v)), 7)
    _RUNTIME_LIMITS.append((ir, opset))
    return ir, opset


def min_ir_version(proto: onnx.ModelProto) -> tuple[int, str]:
    """The lowest IR version `proto` can be written at, and what decides it: its opset imports (onnx's
    version table), its element types (TYPE_IR) and its model-local functions."""
    from onnx import helper
    best = (helper.find_min_ir_version_for(list(proto.opset_import), ignore_unknown=True), "its opset imports")
    if proto.functions:
        best = max(best, (FUNCTION_OVERLOAD_IR, "its model-local functions"))
    types = {t.data_type for t in proto.graph.initializer}
    for vi in list(proto.graph.input) + list(proto.graph.output) + list(proto.graph.value_info):
        types.add(vi.type.tensor_type.elem_type)
    for t in sorted(types):
        if t in TYPE_IR and TYPE_IR[t] > best[0]:
            best = (TYPE_IR[t], f"its {onnx.TensorProto.DataType.Name(t)} tensors")
    return best


def for_runtime(proto: onnx.ModelProto, where: str = "") -> onnx.ModelProto:
    """`proto` at an IR version the installed onnxruntime loads: unchanged when it already does; else
    lowered to the highest IR onnxruntime loads (set in place), when nothing in the model needs more
    (`min_ir_version`); else ModelError (one line: what needs the newer IR and what to do). onnx >= 1.23
    writes IR 14 by default, which onnxruntime 1.31 refuses."""
    ir, _ = runtime_limits()
    if proto.ir_version <= ir:
        return proto
    need, why = min_ir_version(proto)
    if need > ir:
        import onnxruntime as ort
        pre = f"{where}: " if where else ""
        raise ModelError(f"{pre}ONNX IR version {proto.ir_version}, and {why} need IR >= {need}, but the installed "
                         f"onnxruntime {ort.__version__} loads IR versions up to {ir}: export the model for an older "
                         f"opset, or install a newer onnxruntime")
    log.info("%sIR version %d -> %d, the highest the installed onnxruntime loads", f"{where}: " if where else "",
             proto.ir_version, ir)
    proto.ir_version = ir
    return proto


def fusable_opset(proto: onnx.ModelProto) -> bool:
    """Whether PlusEP lowers the model's default-domain ops: opset MIN_OPSET .. the newest onnx knows."""
    default = [o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")]
    if not default:     # default-domain nodes without an opset import: their semantics are unknown
        return not any(n.domain in ("", "ai.onnx") for n in proto.graph.node)
    return MIN_OPSET <= default[0] <= onnx.defs.onnx_opset_version()


def check_model(proto: onnx.ModelProto, where: str = "") -> onnx.ModelProto:
    """Structural checks every rewrite runs first; a problem is one ModelError naming the tensor and,
    where one is involved, the node. Negative dims in the graph's declared shapes are read as dynamic
    dims (as ONNX Runtime does): the returned model is then a copy with those dims unset."""
    pre = f"{where}: " if where else ""
    g = proto.graph
    # opsets: PlusEP lowers default-domain ops by their semantics at the model's opset
    default = [o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")]
    user = next((n for n in g.node if n.domain in ("", "ai.onnx")), None)
    if user is not None and not default:
        # invalid ONNX, yet ONNX Runtime loads it (with its newest opset): leave it unfused, say why
        log.warning("%s%s is in the default ONNX domain but the model imports no default-domain opset (add "
                    "opset_import {domain: '', version: 17}): every node stays unfused", pre, _node_label(user))
    # a valid model of an opset PlusEP does not lower is left unfused (rewrite_detailed), not refused:
    # ORT runs many opset-6 models whose ops did not change at 7
    if default and not fusable_opset(proto):
        newest = onnx.defs.onnx_opset_version()
        why = (f"older than {MIN_OPSET} (pre-7 ops broadcast differently); upgrade it with "
               "onnx.version_converter.convert_version(model, 17) to fuse it") if default[0] < MIN_OPSET else (
              f"newer than {newest}, the newest this onnx {onnx.__version__} knows (its ops' semantics "
              "are unknown)")
        log.warning("%sdefault-domain opset %d is %s: every node stays unfused", pre, default[0], why)
    # every tensor a node reads is defined exactly once
    defined = {i.name for i in g.input} | {t.name for t in g.initializer} | {
        s.values.name for s in g.sparse_initializer}
    producer = {}
    for n in g.node:
        for t in n.output:
            if not t:
                continue
            if t in producer:
                raise ModelError(f"{pre}tensor '{t}' is produced by both {_node_label(producer[t])} and "
                                 f"{_node_label(n)}; an ONNX graph assigns each tensor once")
            producer[t] = n
    defined |= set(producer)
    consumer = {}
    for n in g.node:
        for t in n.input:
            if t:
                consumer.setdefault(t, n)
                if t not in defined:
                    raise ModelError(f"{pre}{_node_label(n)} reads '{t}', which is no graph input, initializer or "
                                     "node output (a missing initializer?)")
    for o in g.output:
        if o.name not in defined:
            raise ModelError(f"{pre}graph output '{o.name}' is not produced by any node, input or initializer")
    # tensors: dims and data agree
    for t in g.initializer:
        why = tensor_problem(t)
        if why:
            user = consumer.get(t.name)
            raise ModelError(f"{pre}initializer '{t.name}'" + (f" (read by {_node_label(user)})" if user else "")
                             + f" {why}")
    constants = {}
    for n in g.node:
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            for a in n.attribute:
                if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                    why = tensor_problem(a.t)
                    if why:
                        raise ModelError(f"{pre}{_node_label(n)}: its value {why}")
                    if n.output:
                        constants[n.output[0]] = a.t
    # declared shapes: negative dims read as dynamic; element counts must fit int64
    negative = []
    for kind, infos in (("graph input", g.input), ("graph output", g.output), ("value_info", g.value_info)):
        for vi in infos:
            if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
                continue
            dims = vi.type.tensor_type.shape.dim
            known = [d.dim_value for d in dims if d.HasField("dim_value")]
            if any(v < 0 for v in known):
                negative.append((kind, vi.name, [d.dim_value if d.HasField("dim_value") else d.dim_param
                                                 for d in dims]))
            count = math.prod(v for v in known if v > 0)
            if count > INT64_MAX:
                user = consumer.get(vi.name) or producer.get(vi.name)
                raise ModelError(f"{pre}{kind} '{vi.name}'" + (f" ({_node_label(user)})" if user else "")
                                 + f" has shape {[d.dim_value or d.dim_param for d in dims]}: {count} elements "
                                 "overflow int64")
    # Reshape / Expand to a constant shape that no tensor can have
    inits = {t.name: t for t in g.initializer}
    for n in g.node:
        if n.domain not in ("", "ai.onnx") or n.op_type not in ("Reshape", "Expand") or len(n.input) < 2:
            continue
        shape = _shape_constant(n.input[1], inits, constants)
        if shape is None:
            continue
        lowest = -1 if n.op_type == "Reshape" else 0
        bad = [v for v in shape if v < lowest]
        if bad or shape.count(-1) > 1:
            what = f"negative dim {bad[0]}" if bad else "more than one -1"
            raise ModelError(f"{pre}{_node_label(n)}: shape '{n.input[1]}' = {shape} has {what}; no tensor has "
                             "that shape")
        if math.prod(v for v in shape if v > 0) > INT64_MAX:
            raise ModelError(f"{pre}{_node_label(n)}: shape '{n.input[1]}' = {shape} has "
                             f"{math.prod(v for v in shape if v > 0)} elements, more than int64 can count")
    if negative:
        for kind, name, dims in negative:
            log.warning("%s%s '%s' declares shape %s; its negative dims are read as dynamic dims (as ONNX Runtime "
                        "does)", pre, kind, name, dims)
        proto = _unset_negative_dims(proto)
    return proto


def _unset_negative_dims(proto: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    g = out.graph
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            for d in vi.type.tensor_type.shape.dim:
                if d.HasField("dim_value") and d.dim_value < 0:
                    d.ClearField("dim_value")
    return out
