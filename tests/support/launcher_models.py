"""Small ONNX models with hand-written launch plans and stand-in image packs, shared by the launcher
tests (tests/native) and the reliability tests (tests/gpu): the stand-in driver (tests/native/fake_cuda.c)
"runs" the fake kernels named in the packs."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from plus_ep import trust
from plus_ep.kernels.wire.pack import write as write_pack

# n <= 1024: fake_add_marker (x + y + 1000); larger: fake_fill (every element = v1 = 7).
PLAN = """plusplan 1
node fused_add
in 0 1 1 s0
in 1 1 1 s0
sym 0 n
out 0 1 1 s0
val 0 s0
val 1 7
route 0 s0,1024,<=
route 1 1
kernel 0 0 fake_add_marker s0,256,cdiv 1 1 256 1 1 0
kernel 1 0 fake_fill s0,256,cdiv 1 1 256 1 1 0
extent in 0 s0
extent in 1 s0
extent out 0 s0
end
"""

SCALE_PLAN = """plusplan 1
node fused_scale
in 0 1 1 s0
out 0 1 1 s0
val 0 s0
val 1 3
route 0 1
kernel 0 0 fake_scale s0,256,cdiv 1 1 256 1 1 0
extent in 0 s0
extent out 0 s0
end
"""


def pack(images: list[bytes]) -> bytes:
    """An image pack of stand-in images (no PTX), written by the one pack writer."""
    return write_pack(images)


def fake_pack(tag: str) -> bytes:
    entries = ["fake_add", "fake_add_marker", "fake_fill", "fake_scale"]
    return pack([f"FAKECUBIN\n#{tag}\n{''.join(e + chr(10) for e in entries)}".encode() + b"\0"])


def fused_node(name, inputs, outputs, overload, plan, packs, vouch=True, op_type="Fused"):
    """A Fused (or `op_type`) node with a hand-written plan and stand-in packs. vouch: the test trusts
    the node as it is made here (its digest, plus_ep/trust.py, goes into the trust manifest of
    $PLUS_EP_CACHE_DIR, as `plus-ep trust --accept` would; a node without a digest, e.g. a plan whose
    `archs` line names a missing pack, is left for the launcher to refuse). The digest covers the whole
    node: change it after this and the launcher refuses it."""
    attrs = {"plus_plan": plan}
    for arch, data in packs.items():
        attrs[f"plus_images_{arch}"] = numpy_helper.from_array(np.frombuffer(data, dtype=np.uint8), name="")
    node = helper.make_node(op_type, inputs, outputs, name=name, domain="ai.plus_ep", overload=overload, **attrs)
    if vouch:
        try:
            trust.record(trust.node_digest(node), "tests: stand-in packs")
        except trust.TrustError:
            pass
    return node


def function(overload, inputs, body_op, body_inputs=None):
    nodes = [helper.make_node(body_op, list(body_inputs or inputs), ["C"])]
    return helper.make_function("ai.plus_ep", "Fused", list(inputs), ["C"], nodes,
                                [helper.make_opsetid("", 17)], overload=overload)


def model(nodes, functions, inputs=("X", "Y"), output="Z"):
    vi = [helper.make_tensor_value_info(i, TensorProto.FLOAT, ["n"]) for i in inputs]
    g = helper.make_graph(nodes, "g", vi, [helper.make_tensor_value_info(output, TensorProto.FLOAT, ["n"])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.plus_ep", 1)],
                          functions=functions, ir_version=10)
    onnx.checker.check_model(m)
    return m


def add_model(plan=PLAN, packs=None, name="fused_add"):
    packs = {"sm_90": fake_pack("sm_90")} if packs is None else packs
    return model([fused_node(name, ["X", "Y"], ["Z"], "k1", plan, packs)], [function("k1", ["A", "B"], "Add")])


def launches(log: Path) -> list[str]:
    return [l for l in log.read_text().splitlines() if l.startswith("launch ")] if log.exists() else []

