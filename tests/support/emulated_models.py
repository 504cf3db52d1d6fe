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
from onnx import numpy_helper
from plus_ep.kernels.wire import pack

from tests.support.graphs import Graph

ROOT = Path(__file__).resolve().parents[2]
H = 32


def tiny_model(hidden: int = H) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    g = Graph("tiny")
    g.input("X", ["batch", "seq", hidden])
    for name, arr in (("g", rng.standard_normal(hidden)), ("b", rng.standard_normal(hidden)),
                      ("W", rng.standard_normal((hidden, hidden)) / 6), ("B", rng.standard_normal(hidden))):
        g.init(name, arr.astype(np.float32))
    g.op("LayerNormalization", "X", "g", "b", out="ln", axis=-1, epsilon=1e-5, name="ln")
    g.op("MatMul", "ln", "W", out="mm", name="mm")
    g.op("Add", "mm", "B", out="y", name="add")
    g.op("Relu", "y", out="Y", name="relu")
    g.output("Y", ["batch", "seq", hidden])
    return g.model()


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


def swap_first_images(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of a rewritten model whose first two fused nodes exchanged image 0 (cubin and PTX
    together) in every pack: each is valid code, in the wrong node."""
    from plus_ep import trust
    m = onnx.ModelProto()
    m.CopyFrom(model)
    a, b = trust.kernel_nodes(m)[:2]
    pa, pb = packs_of(a), packs_of(b)
    for arch in pa:
        ia, ib = pack.parse(pa[arch]), pack.parse(pb[arch])
        ia[0], ib[0] = ib[0], ia[0]
        set_pack(a, arch, pack.write(ia))
        set_pack(b, arch, pack.write(ib))
    return m


def corrupt_ptx(model: onnx.ModelProto, node_name: str, arch: str, old: str, new: str, retie: bool = True) -> str:
    """Replace the first `old` instruction (e.g. "sub.f32") with `new` in image 0's PTX of one node's
    pack; the cubin stays as it is. Returns the changed PTX line. retie: record the edited PTX as the
    cubin's source (kernels/wire/pack.py tie), so the pack stands for a kernel whose code is wrong; without
    it, the PTX no longer matches the digest recorded with its cubin."""
    node = next(n for n in model.graph.node if n.name == node_name)
    images = pack.parse(packs_of(node)[arch])
    lines = images[0].ptx.split("\n")
    i = next(k for k, ln in enumerate(lines) if re.match(rf"\s+{re.escape(old)}\s", ln))
    lines[i] = lines[i].replace(old, new, 1)
    text = "\n".join(lines)
    images[0] = pack.Image(images[0].cubin, pack.tie(images[0].cubin, text) if retie else text)
    set_pack(node, arch, pack.write(images))
    return lines[i].strip()


def module_owners(emu) -> dict:
    """{emulator module handle: node} for the modules an Emulator loaded: a cubin several nodes share (every
    layer of a model) is loaded once per node, in order, so each load goes to the first of its nodes not
    given one yet (as `plus-ep verify` attributes them)."""
    owner, taken = {}, set()
    for h, key in emu.load_order:
        info = emu.registry.get(key)
        cands = info.nodes if info else []
        pick = next((n for n in cands if (n, key) not in taken), cands[0] if cands else "")
        taken.add((pick, key))
        owner[h] = pick
    return owner


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
