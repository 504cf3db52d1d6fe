"""Contrib ops through PlusEP's kernels on the CPU PTX interpreter (emulated CUDA driver, real launcher):
the int4 GEMM (MatMulNBits decoded in the gemm mainloop, kernels/families/gemm/nbits.py) against ORT CPU's own
MatMulNBits kernel, and greedy generation of an onnxruntime-genai-form int4 decoder whose every
GroupQueryAttention and MatMulNBits runs inside fused nodes with kernels, against ORT CPU."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from plus_ep.report import report
from plus_ep.rewrite import rewrite_detailed
from tests.support import contrib_cases as cc
from tests.support.emulated_models import run_child

RUNNER = r"""
import json, sys
import numpy as np, onnx, onnxruntime as ort
from plus_ep.verification.emulator import Emulator
emu = Emulator.get()
import plus_ep
from plus_ep.zoo.ortopt import genai_greedy
path, arch, mode, arg, out_path = sys.argv[1:6]
model = onnx.load(path)
emu.set_arch(arch)
emu.register_model(model)
so = ort.SessionOptions()
so.register_custom_ops_library(plus_ep.get_library_path())
so.log_severity_level = 3
sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
names = [o.name for o in sess.get_outputs()]
runs = []
run = lambda f: runs.append(1) or dict(zip(names, sess.run(None, f)))
if mode == "feeds":
    np.savez(out_path, **run(dict(np.load(arg))))
    res = {}
else:
    res = {"tokens": genai_greedy(run, model, json.loads(arg), 3)}
fused = [n for n in model.graph.node if n.domain == "ai.plus_ep"]
from plus_ep.verification.run import _attribute      # which node loaded each module (as plus-ep verify does)
owner = _attribute(emu.load_order, fused, arch)
launched = {owner.get(r.module, r.node) for r in emu.records}
res.update(launches=len(emu.records), runs=len(runs), unlaunched=sorted({n.name for n in fused} - launched),
           errors=[r.error for r in emu.records if r.error][:3], findings=sum(len(r.findings) for r in emu.records))
print(json.dumps(res))
"""

NBITS = {c.name: c for c in cc.nbits_cases()}
# (case, arch, fp32 math): 4-bit symmetric and 4-bit with packed zero points over a partial last block
# (K 40, block 16) on the f16 mma.sync path, 8-bit on TF32, float zero points + bias on exact fp32 SIMT
KERNEL_CASES = [("MatMulNBits_b4_bs32_sym_float16", "sm_80", "tf32"),
                ("MatMulNBits_b4_bs16_zp_float16", "sm_90a", "tf32"),
                ("MatMulNBits_b8_bs32_zp_float32", "sm_80", "tf32"),
                ("MatMulNBits_b4_bs32_floatzp_bias", "sm_80", "exact")]


@pytest.mark.parametrize("name,arch,math", KERNEL_CASES, ids=[c[0] for c in KERNEL_CASES])
def test_int4_gemm_kernel_matches_ort_matmulnbits(name, arch, math, tmp_path):
    case = NBITS[name]
    model = cc.single_node_model(case)
    r = rewrite_detailed(model, archs=[arch], fp32_math=math)
    assert not r.kernels.failures, r.kernels.failures
    (sg,) = r.subgraphs
    bits = next(a.i for a in case.node.attribute if a.name == "bits")
    assert sg.roles.nbits["bits"] == bits
    (node,) = [n for n in r.model.graph.node if n.domain == "ai.plus_ep"]
    assert "b" in node.input and "s" in node.input         # packed weights and scales, not a dequantised B
    path = tmp_path / "m.plus.onnx"
    onnx.save(r.model, path)
    feeds = {i.name: case.feeds[i.name] for i in model.graph.input}
    np.savez(tmp_path / "f.npz", **feeds)
    res = json.loads(run_child(RUNNER, [path, arch, "feeds", tmp_path / "f.npz", tmp_path / "o.npz"], timeout=600))
    assert res["launches"] >= 1 and not res["errors"] and res["findings"] == 0 and not res["unlaunched"], res
    got = np.load(tmp_path / "o.npz")["y"]
    want = cc.reference(case)["y"]                          # ORT CPU's MatMulNBits kernel
    tol = {"float16": 1e-2}.get(str(want.dtype), 5e-3 if math == "tf32" else 2e-5)
    assert got.shape == want.shape and cc.rel_err(got, want) <= tol, cc.rel_err(got, want)


def test_int4_gemm_hook_reads_packed_fields():
    """The decoding hook the template calls reads the packed byte of element k and its block's scale."""
    from plus_ep.kernels.families.gemm.nbits import chunk_hook

    class Job:
        inputs = ["a", "q", "s", "z"]

    class Em:
        @staticmethod
        def dtype(t):
            return {"s": onnx.TensorProto.FLOAT16, "z": onnx.TensorProto.UINT8}[t]
    src = chunk_hook(Job, Em, {"K": 40, "N": 8, "bits": 4, "block_size": 16, "packed": "q", "scales": "s",
                               "zero_points": "z"})
    assert "#define PLUS_B_NBITS 1" in src and "args.in[1] + n * 24LL" in src      # 3 blocks x 8 bytes
    assert "n * 3LL + blk" in src and "n * 2LL + blk / 2" in src                   # scales, packed zero points


def _dequantised(inits, nb) -> np.ndarray:
    """float64 [K, N] weight of a MatMulNBits decoder description, from its packed fields (numpy, not ORT)."""
    K, N, bits, bs = nb["K"], nb["N"], nb["bits"], nb["block_size"]
    per, mask = 8 // bits, (1 << bits) - 1
    fields = lambda q: np.stack([(q >> (bits * j)) & mask for j in range(per)], -1).reshape(N, -1).astype(float)  # noqa: E731
    s = inits[nb["scales"]].astype(np.float64).reshape(N, -1)
    blocks = s.shape[1]
    z = fields(inits[nb["zero_points"]].reshape(N, -1))[:, :blocks] if nb["zero_points"] else 1 << (bits - 1)
    w = (fields(inits[nb["packed"]].reshape(N, -1)).reshape(N, blocks, bs) - np.broadcast_to(z, (N, blocks))[..., None])
    return (w * s[..., None]).reshape(N, -1)[:, :K].T


F16, F32 = onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT
# (id, arch, fp32 math, gated_models.gated_nbits_model arguments): 2/4/8 bits, zero points on the gate, the up
# weight, both or neither, K with a partial last quantisation block (40/16, 70/32), N not a multiple of 8 (37, 20);
# f16 mma.sync, TF32 mma.sync and exact fp32 SIMT (gemm.cuh on sm_80 and sm_90a alike)
GATED_NBITS = [("b4-gatezp-f16-K40-N37", "sm_80", "exact", dict(dtype=F16)),
               ("b2-bothzp-tf32", "sm_90a", "tf32", dict(dtype=F32, bits=2, k=48, inter=24, zero_points=(True, True))),
               ("b8-upzp-simt-K70-N20", "sm_80", "exact",
                dict(dtype=F32, bits=8, block=32, k=70, inter=20, zero_points=(False, True), gate_bias=False)),
               ("b4-sym-f16-aligned", "sm_90a", "exact",
                dict(dtype=F16, block=32, k=64, inter=48, zero_points=(False, False)))]


@pytest.mark.parametrize("name,arch,math,kw", GATED_NBITS, ids=[c[0] for c in GATED_NBITS])
def test_gated_int4_mlp_kernel_matches_ort_and_float64(name, arch, math, kw, tmp_path):
    """Gate and up MatMulNBits weights, each with its own scales (the up weight 4x larger) and zero points, decoded
    in one gated GEMM's mainloop (PLUS_GATED + PLUS_B_NBITS): through the launcher on the interpreter, against ORT
    CPU's MatMulNBits kernels on the original model and a float64 numpy SwiGLU of the dequantised weights."""
    from onnx import numpy_helper

    from tests.support import gated_models
    model = gated_models.gated_nbits_model(**kw)
    r = rewrite_detailed(model, archs=[arch], fp32_math=math)
    assert not r.kernels.failures, r.kernels.failures
    (sg,) = r.subgraphs
    assert sg.pattern.name == "gemm_gated" and [nb["packed"] for nb in sg.roles.nbits] == ["gate_Q", "up_Q"]
    (node,) = r.model.graph.node
    assert {"gate_Q", "up_Q", "gate_scales", "up_scales"} <= set(node.input)    # the packed fields, no dequantised B
    path = tmp_path / "m.plus.onnx"
    onnx.save(r.model, path)
    dt = np.float16 if kw["dtype"] == F16 else np.float32
    x = np.random.default_rng(5).standard_normal((2, 5, kw.get("k", 40))).astype(dt)
    np.savez(tmp_path / "f.npz", X=x)
    res = json.loads(run_child(RUNNER, [path, arch, "feeds", tmp_path / "f.npz", tmp_path / "o.npz"], timeout=600))
    assert res["launches"] == 1 and not res["errors"] and res["findings"] == 0 and not res["unlaunched"], res
    got = np.load(tmp_path / "o.npz")["Y"]
    want = cc.run_ort(model, {"X": x})["Y"]                    # ORT CPU's MatMulNBits kernels
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    g, u = (x.astype(np.float64) @ _dequantised(inits, nb) for nb in sg.roles.nbits)
    g = g + inits["gate_bias"] if "gate_bias" in inits else g
    ref = g / (1 + np.exp(-g)) * u
    tol = 1e-2 if dt == np.float16 else (5e-3 if math == "tf32" else 2e-5)
    assert cc.rel_err(got, want) <= tol and cc.rel_err(got, ref) <= tol, (cc.rel_err(got, want), cc.rel_err(got, ref))


@pytest.fixture(scope="module")
def genai_kernels(tmp_path_factory):
    from plus_ep.zoo import ortopt
    model = onnx.load(str(ortopt.genai_llama(layers=2, dtype="float16")))
    r = rewrite_detailed(model, archs=["sm_90a"])
    path = tmp_path_factory.mktemp("genai") / "m.plus.onnx"
    onnx.save(r.model, path)
    return model, r, path


def test_genai_int4_every_gqa_and_matmulnbits_has_kernels(genai_kernels):
    model, r, _ = genai_kernels
    assert not r.kernels.failures, r.kernels.failures
    rep = report(r)
    assert rep["contrib_ops"]["GroupQueryAttention"] == {"expanded": 2, "fused": 2}
    assert rep["contrib_ops"]["MatMulNBits"] == {"expanded": 11, "fused": 11}
    # each decodes int4 in-kernel: 7 GEMMs one weight each, and per layer the gate/up pair in one gated GEMM
    nbits = [sg.roles.nbits for sg in r.subgraphs if getattr(sg.roles, "nbits", None)]
    assert sorted(len(nb) if isinstance(nb, (list, tuple)) else 1 for nb in nbits) == [1] * 7 + [2, 2]
    assert rep["patterns"]["gemm_gated"] == 2 and rep["data_kernels_after"] == 14
    assert not any(n.domain == "com.microsoft" for n in r.model.graph.node)
    used = {t for n in r.model.graph.node for t in n.input}
    assert not any(n.op_type in ("BitShift", "BitwiseAnd") for n in r.model.graph.node)   # no dequantised copy
    assert all(t.name in used for t in r.model.graph.initializer if t.name.endswith("_Q4"))


def test_genai_int4_greedy_generation_matches_ort_cpu(genai_kernels):
    """Prompt + 2 decode steps (3 tokens) with every fused node's kernels on the interpreter: the same
    tokens as ORT CPU running the original model with its own contrib kernels."""
    import onnxruntime as ort

    from plus_ep.zoo.ortopt import genai_greedy
    model, _, path = genai_kernels
    prompt = [17, 200, 3, 99, 41]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    want = genai_greedy(lambda f: dict(zip(names, sess.run(None, f))), model, prompt, 3)
    res = json.loads(run_child(RUNNER, [path, "sm_90a", "greedy", json.dumps(prompt), "-"], timeout=900))
    assert not res["errors"] and res["findings"] == 0 and not res["unlaunched"], res
    assert res["tokens"] == want
