"""EPContext models: ONNX Runtime's ahead-of-time form of a model for one execution provider, written for
PlusEP by ORT's own compile API or by `plus-ep rewrite --epcontext` (docs/guide/epcontext.md).

    import onnxruntime as ort, plus_ep
    so = ort.SessionOptions()
    so.add_provider_for_devices(plus_ep.get_ep_devices(), {})
    ort.ModelCompiler(so, "model.onnx", embed_compiled_data_into_model=True).compile_to_file("model_ctx.onnx")

    from plus_ep import epcontext
    epcontext.compile_model("model.onnx", "model_ctx.onnx")     # the same, failing in one line where it cannot
    epcontext.to_epcontext(plus_ep.rewrite("model.onnx"), "model_ctx.onnx", embed=False)   # the same, offline
    epcontext.payloads(onnx.load("model_ctx.onnx"), "model_ctx.onnx")   # {node: [Part, ...]}

Each `com.microsoft::EPContext` node with source "PlusEP" stands for one compiled node: its kernels (plan
and image packs of every arch) in a payload, embedded in `ep_cache_context` (embed_mode 1) or in a side
file beside the model named there (embed_mode 0). The payload's bytes are those of
plus_ep/native/ep_context.h ("PLUSEPCTX1\\n", tagged records; embedded as "PLUSEPCTX1Z" + COBS, which has
no NUL byte). The plugin EP runs such a model without planning or rewriting, trust-checked like a fused
node (kernels/CONTRACT.md §5). Unlike a rewritten model, an EPContext model has no function bodies to
fall back on: it needs PlusEP on a GPU one of its packs serves.
"""
from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass, field

import onnx
from onnx import helper

MAGIC = b"PLUSEPCTX1\n"
EMBED_MAGIC = b"PLUSEPCTX1Z"
DOMAIN, OP, SOURCE = "com.microsoft", "EPContext", "PlusEP"
SUFFIX = ".plusep"


@dataclass
class Part:
    """One part of a compiled node: a kernel node (a Fused node of the rewrite: plan, packs) or a host part
    (an ONNX model ONNX Runtime runs on the CPU inside the node)."""
    node: str
    plan: str
    inputs: list                        # "#k" = the EPContext node's input k, "" absent, else a tensor inside
    outputs: list                       # "#k" = its output k, "" = not used, else a tensor inside
    packs: dict = field(default_factory=dict)     # arch -> image pack bytes
    signature: str | None = None
    kind: str = "kernel"                # or "host"
    model: bytes = b""                  # host: the serialized ONNX model
    op_type: str = ""                   # kernel: the Fused node it was, as the trust digest covers it:
    attributes: list = field(default_factory=list)      # its attribute names
    strings: dict = field(default_factory=dict)         # its STRING attributes (name -> bytes)


# ---------------------------------------------------------------------------------------------- compile
def compile_model(model: str | os.PathLike | bytes, output: str | os.PathLike, embed: bool = True,
                  options: dict | None = None) -> str:
    """ONNX Runtime's ModelCompiler with PlusEP's devices: `model` (a path, or bytes) -> the EPContext
    model at `output` (kernels embedded, or in side files beside it). Raises RuntimeError with one line
    where PlusEP cannot compile (no device: the reason; nothing PlusEP can take in the model).

    >>> compile_model("bert.onnx", "bert_ctx.onnx", options={"fp32_math": "exact"})
    """
    import onnxruntime as ort

    from . import ep, options as opts
    devices = ep.get_ep_devices()
    if not devices:
        raise RuntimeError(f"PlusEP cannot compile {model if isinstance(model, (str, os.PathLike)) else 'the model'} "
                           f"into an EPContext model here: {ep.no_device_reason() or 'it offers no device'}")
    so = ort.SessionOptions()
    so.add_provider_for_devices(devices, opts.check(dict(options or {})))
    source = model if isinstance(model, bytes) else os.fspath(model)
    try:
        ort.ModelCompiler(so, source, embed_compiled_data_into_model=embed,
                          flags=ort.OrtCompileApiFlags.ERROR_IF_NO_NODES_COMPILED).compile_to_file(os.fspath(output))
    except Exception as e:  # noqa: BLE001 - ORT's own exception types
        raise RuntimeError(f"PlusEP could not compile the model into an EPContext model: {e}".splitlines()[0]) from e
    return os.fspath(output)


# ---------------------------------------------------------------------------------------------- COBS
def cobs_encode(data: bytes) -> bytes:
    """Consistent-overhead byte stuffing: the bytes without any NUL (one code byte per 254 bytes)."""
    out = bytearray()
    segments = bytes(data).split(b"\0")
    for seg in segments:
        while len(seg) >= 254:
            out += b"\xff" + seg[:254]
            seg = seg[254:]
        out.append(len(seg) + 1)        # the block ends the segment; a zero follows unless it is the last
        out += seg
    return bytes(out)


def cobs_decode(data: bytes) -> bytes:
    out = bytearray()
    i, n = 0, len(data)
    while i < n:
        code = data[i]
        i += 1
        if code == 0 or code - 1 > n - i or 0 in data[i:i + code - 1]:
            raise ValueError("not valid COBS")
        out += data[i:i + code - 1]
        i += code - 1
        if code < 0xFF and i < n:
            out.append(0)
    return bytes(out)


# ---------------------------------------------------------------------------------------------- codec
def _record(tag: bytes, value: bytes) -> bytes:
    return tag + struct.pack("<Q", len(value)) + value


def encode(parts: list, constants: dict | None = None) -> bytes:
    """The raw payload (what a side file holds). constants: name -> numpy array."""
    import numpy as np
    from onnx import helper
    out = [MAGIC]
    for name, arr in (constants or {}).items():
        arr = np.ascontiguousarray(arr)
        n = name.encode()
        out.append(_record(b"C", struct.pack("<H", len(n)) + n + struct.pack("<iB", helper.np_dtype_to_tensor_dtype(
            arr.dtype), arr.ndim) + struct.pack(f"<{arr.ndim}q", *arr.shape) + arr.tobytes()))
    for p in parts:
        if p.kind == "host":
            out.append(_record(b"H", p.node.encode()))
            out.append(_record(b"M", bytes(p.model)))
        else:
            out.append(_record(b"P", p.node.encode()))
            out.append(_record(b"L", p.plan.encode()))
        out.append(_record(b"I", "\n".join(p.inputs).encode()))
        out.append(_record(b"O", "\n".join(p.outputs).encode()))
        for arch, blob in p.packs.items():
            a = arch.encode()
            out.append(_record(b"A", struct.pack("<H", len(a)) + a + bytes(blob)))
        if p.signature:
            out.append(_record(b"S", p.signature.encode()))
        if p.kind == "kernel":
            if p.op_type:
                out.append(_record(b"T", p.op_type.encode()))
            if p.attributes:
                out.append(_record(b"N", "\n".join(p.attributes).encode()))
            for name, value in p.strings.items():
                n = name.encode()
                out.append(_record(b"V", struct.pack("<H", len(n)) + n + bytes(value)))
    out.append(_record(b"E", b""))
    return b"".join(out)


def embedded(raw: bytes) -> bytes:
    """The ep_cache_context value of embed_mode 1."""
    return EMBED_MAGIC + cobs_encode(raw)


def decode(data: bytes) -> list:
    """Parts of a payload, raw or embedded; ValueError naming what is wrong."""
    return decode_all(data)[0]


def decode_all(data: bytes) -> tuple[list, dict]:
    """(parts, constants name -> numpy array) of a payload, raw or embedded."""
    import numpy as np
    from onnx import helper
    data = bytes(data)
    if data.startswith(EMBED_MAGIC):
        data = cobs_decode(data[len(EMBED_MAGIC):])
    if not data.startswith(MAGIC):
        raise ValueError('not a PlusEP context payload (no "PLUSEPCTX1" header)')
    i, parts, consts, ended = len(MAGIC), [], {}, False
    while i < len(data) and not ended:
        if len(data) - i < 9:
            raise ValueError("a record header is cut off")
        tag, (n,) = data[i:i + 1], struct.unpack_from("<Q", data, i + 1)
        i += 9
        if n > len(data) - i:
            raise ValueError(f"record {tag!r} says {n} bytes, {len(data) - i} are left")
        value = data[i:i + n]
        i += n
        if tag == b"E":
            ended = True
        elif tag in (b"P", b"H"):
            parts.append(Part(value.decode(), "", [], [], kind="host" if tag == b"H" else "kernel"))
        elif tag == b"C":
            (nl,) = struct.unpack_from("<H", value, 0)
            name = value[2:2 + nl].decode()
            dtype, rank = struct.unpack_from("<iB", value, 2 + nl)
            dims = struct.unpack_from(f"<{rank}q", value, 2 + nl + 5)
            raw = value[2 + nl + 5 + 8 * rank:]
            consts[name] = np.frombuffer(raw, helper.tensor_dtype_to_np_dtype(dtype)).reshape(dims)
        elif not parts:
            raise ValueError(f"record {tag!r} before the first part")
        elif tag == b"L":
            parts[-1].plan = value.decode()
        elif tag == b"M":
            parts[-1].model = value
        elif tag in (b"I", b"O"):
            names = value.decode().split("\n") if value else []
            setattr(parts[-1], "inputs" if tag == b"I" else "outputs", names)
        elif tag == b"A":
            (al,) = struct.unpack_from("<H", value, 0)
            parts[-1].packs[value[2:2 + al].decode()] = value[2 + al:]
        elif tag == b"S":
            parts[-1].signature = value.decode()
        elif tag == b"T":
            parts[-1].op_type = value.decode()
        elif tag == b"N":
            parts[-1].attributes = value.decode().split("\n") if value else []
        elif tag == b"V":
            (nl,) = struct.unpack_from("<H", value, 0)
            parts[-1].strings[value[2:2 + nl].decode()] = value[2 + nl:]
        else:
            raise ValueError(f"unknown record {tag!r}")
    if not ended or i != len(data):
        raise ValueError("the payload is cut off or has bytes after its end record")
    return parts, consts


# ---------------------------------------------------------------------------------------------- models
def is_context_node(node: onnx.NodeProto) -> bool:
    return node.domain == DOMAIN and node.op_type == OP and any(
        a.name == "source" and a.s == SOURCE.encode() for a in node.attribute)


def payloads(model: onnx.ModelProto, model_path: str | os.PathLike | None = None) -> dict:
    """{EPContext node name: its parts} for every PlusEP EPContext node (side files read beside
    `model_path`)."""
    out = {}
    for n in model.graph.node:
        if not is_context_node(n):
            continue
        a = {x.name: x for x in n.attribute}
        value = a["ep_cache_context"].s
        if "embed_mode" in a and a["embed_mode"].i == 0:
            if model_path is None:
                raise ValueError(f"EPContext node '{n.name}' keeps its payload in {value.decode()!r}: give the model's path")
            with open(os.path.join(os.path.dirname(os.fspath(model_path)), value.decode()), "rb") as f:
                value = f.read()
        out[n.name] = decode(value)
    return out


def _fused_part(node: onnx.NodeProto, ins: list, outs: list) -> Part | None:
    """The payload part of a Fused node whose EPContext node reads `ins` and writes `outs`."""
    from . import trust
    plan = trust.node_plan(node)
    if plan is None:
        return None
    sig = next((a.s.decode() for a in node.attribute if a.name == trust.SIGNATURE_ATTR), None)
    return Part(node.name, plan.decode(), [f"#{ins.index(i)}" if i else "" for i in node.input],
                [f"#{outs.index(o)}" if o else "" for o in node.output], trust.node_packs(node), sig,
                op_type=node.op_type, attributes=[a.name for a in node.attribute],
                strings={a.name: a.s for a in node.attribute     # the plan travels as the part's plan
                         if a.type == onnx.AttributeProto.STRING and a.name not in (trust.SIGNATURE_ATTR, "plus_plan")})


def side_file_name(model_path: str, node: str) -> str:
    """The side file of `node` beside the EPContext model at `model_path` (as ep_context.c names it)."""
    stem = os.path.splitext(os.path.basename(model_path))[0]
    return f"{stem}_{re.sub(r'[^A-Za-z0-9.-]', '_', node)[:127]}{SUFFIX}"


def to_epcontext(model: onnx.ModelProto, path: str | os.PathLike | None = None, embed: bool = True) -> onnx.ModelProto:
    """A rewritten model (plus_ep.rewrite with kernels) in EPContext form: each Fused node that carries a
    plan becomes an EPContext node with its inputs and outputs (what ONNX Runtime's ModelCompiler with
    PlusEP writes); other nodes stay. embed=False writes each payload to a side file beside `path` (the
    EPContext model's future location; required then)."""
    from .graph_rewrites.fuse import is_fused
    if not embed and path is None:
        raise ValueError("embed=False writes side files beside the EPContext model: give its path")
    try:      # the types of every fused node's outputs (their function bodies): an EPContext node has none
        typed = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - a model too large for the checker keeps what it declares
        typed = model
    out = onnx.ModelProto()
    out.CopyFrom(typed)
    del out.graph.node[:]
    from . import __version__
    sdk = f"{SOURCE} {__version__}"
    converted = 0
    for n in typed.graph.node:
        ins, outs = list(dict.fromkeys(i for i in n.input if i)), [o for o in n.output if o]
        part = _fused_part(n, ins, outs) if is_fused(n) else None
        if part is None:
            out.graph.node.append(n)
            continue
        raw = encode([part])
        if embed:
            value = embedded(raw)
        else:
            value = side_file_name(os.fspath(path), n.name).encode()
            with open(os.path.join(os.path.dirname(os.path.abspath(os.fspath(path))), value.decode()), "wb") as f:
                f.write(raw)
        out.graph.node.append(helper.make_node(
            OP, ins, outs, name=n.name, domain=DOMAIN, main_context=1, embed_mode=int(embed),
            ep_cache_context=value, source=SOURCE, ep_sdk_version=sdk, partition_name=n.name,
            hardware_architecture=",".join(part.packs)))
        converted += 1
    used = {(n.domain, n.op_type) for n in out.graph.node}
    keep = [f for f in out.functions if (f.domain, f.name) in used]
    del out.functions[:]
    out.functions.extend(keep)
    if converted and not any(o.domain == DOMAIN for o in out.opset_import):
        out.opset_import.append(helper.make_opsetid(DOMAIN, 1))
    if not any(n.domain == "ai.plus_ep" for n in out.graph.node):
        kept = [o for o in out.opset_import if o.domain != "ai.plus_ep"]
        del out.opset_import[:]
        out.opset_import.extend(kept)
    return out
