"""Models for the emulated-driver tests (tests/emulated): a tiny LayerNorm -> MatMul+Add+Relu graph
rewritten with real kernels (NVRTC, sm_80 and sm_90a), small enough that its kernels run on the PTX
interpreter in a fraction of a second; and helpers to rewrite a pack's PTX."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from plus_ep.kernels.wire import pack

ROOT = Path(__file__).resolve().parents[2]
H = 32


def tiny_model(hidden: int = H) -> onnx.ModelProto:
    rng = np.random.default_rng(0)

    def init(name, arr):
        return numpy_helper.from_array(arr.astype(np.float32), name)
    nodes = [
        helper.make_node("LayerNormalization", ["X", "g", "b"], ["ln"], axis=-1, epsilon=1e-5, name="ln"),
        helper.make_node("MatMul", ["ln", "W"], ["mm"], name="mm"),
        helper.make_node("Add", ["mm", "B"], ["y"], name="add"),
        helper.make_node("Relu", ["y"], ["Y"], name="relu"),
    ]
    g = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", "seq", hidden])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", "seq", hidden])],
        [init("g", rng.standard_normal(hidden)), init("b", rng.standard_normal(hidden)),
         init("W", rng.standard_normal((hidden, hidden)) / 6), init("B", rng.standard_normal(hidden))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def rewritten_tiny(archs=("sm_80", "sm_90a"), fp32_math="exact") -> onnx.ModelProto:
    import plus_ep
    r = plus_ep.rewrite_detailed(tiny_model(), archs=list(archs), fp32_math=fp32_math)
    assert not r.kernels.failures, r.kernels.failures
    return r.model


def packs_of(node) -> dict:
    return {a.name[len("plus_images_"):]: numpy_helper.to_array(a.t).tobytes()
            for a in node.attribute if a.name.startswith("plus_images_")}


def set_pack(node, arch: str, blob: bytes) -> None:
    for a in node.attribute:
        if a.name == f"plus_images_{arch}":
            a.t.CopyFrom(numpy_helper.from_array(np.frombuffer(blob, np.uint8), name=a.t.name))
            return
    raise KeyError(arch)


def corrupt_ptx(model: onnx.ModelProto, node_name: str, arch: str, old: str, new: str) -> str:
    """Replace the first `old` instruction (e.g. "sub.f32") with `new` in image 0's PTX of one node's
    pack; the cubin stays as it is. Returns the changed PTX line."""
    node = next(n for n in model.graph.node if n.name == node_name)
    images = pack.parse(packs_of(node)[arch])
    lines = images[0].ptx.split("\n")
    i = next(k for k, ln in enumerate(lines) if re.match(rf"\s+{re.escape(old)}\s", ln))
    lines[i] = lines[i].replace(old, new, 1)
    images[0] = pack.Image(images[0].cubin, "\n".join(lines))
    set_pack(node, arch, pack.write(images))
    return lines[i].strip()


def child_env(extra=None) -> dict:
    """A child's environment with the emulated driver as the launcher's CUDA library."""
    from plus_ep.verification.emulator import library_path
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_CUDA_", "PLUS_EP_CUDA"))}
    env["PLUS_EP_CUDA_LIBRARY"] = library_path()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.update(extra or {})
    return env


def run_child(script: str, args, timeout=300) -> str:
    r = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True,
                       check=False, env=child_env(), timeout=timeout, cwd=str(ROOT))
    assert r.returncode == 0, f"child exited with {r.returncode} (a crash is a failure)\n{r.stderr[-4000:]}"
    return r.stdout.strip().splitlines()[-1]
