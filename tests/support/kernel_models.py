"""Whole models through their kernels on the CPU PTX interpreter: the real launcher (custom-op library) in
ONNX Runtime on the emulated CUDA driver, against ONNX Runtime CPU on the original model.

    model = realistic_weights(onnx.load(path))          # non-zero biases, norm weights != 1, peaky logits
    res = run_on_kernels(model, feeds, archs=["sm_80", "sm_90a"], fp32_math="exact")
    res.outputs["sm_80"][name]                          # an output through the kernels
    res.launches["sm_80"]                               # [node, entry, grid, error, findings, seconds, block, smem,
                                                       #  persistent TMA GEMM]
    check_model_on_kernels(model, feeds, ["sm_80"], "exact")   # all of it, against ORT CPU within bounds

The launcher reads its driver once per process, so each arch runs in a child process (as `plus-ep verify`
does); its outputs come back through an .npz file. Device memory of the emulated driver starts as 0xFF
bytes (tests/support/poison.py), so an output element no kernel wrote still holds the poison.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

ROOT = Path(__file__).resolve().parents[2]

_NORM_WORDS = ("layernorm", "layer_norm", "ln_", "norm.weight", "ln.weight", "rmsnorm")


def realistic_weights(model: onnx.ModelProto, seed: int = 0, gain: float = 1.5) -> onnx.ModelProto:
    """A copy of `model` whose float weights look trained rather than freshly initialised: every float
    initializer of at least 16 elements is redrawn (scalars, shapes and small constants are kept):
    matrices N(0, 1) * gain / sqrt(rows) (gain > 1: attention logits spread over several units, so
    softmax is peaky, not near uniform), norm scales 1 + 0.3 N(0, 1) (never all ones), other vectors
    (biases, embeddings' rows) 0.3 N(0, 1) (never zero). The reference runs the same weights."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    rng = np.random.default_rng(seed)
    for k, t in enumerate(out.graph.initializer):
        if t.data_type not in (TensorProto.FLOAT, TensorProto.FLOAT16):
            continue
        a = numpy_helper.to_array(t)
        if a.size < 16:
            continue
        if a.ndim == 1:
            norm = any(w in t.name.lower() for w in _NORM_WORDS) and t.name.lower().endswith("weight")
            v = 1 + 0.3 * rng.standard_normal(a.shape) if norm else 0.3 * rng.standard_normal(a.shape)
        else:
            v = rng.standard_normal(a.shape) * gain / np.sqrt(a.shape[-2])
        out.graph.initializer[k].CopyFrom(numpy_helper.from_array(v.astype(a.dtype), t.name))
    return out


def to_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    """ORT's float16 converter (float inputs, outputs and weights become float16), as bench/harness/export.py."""
    import warnings

    from onnxruntime.transformers.float16 import convert_float_to_float16
    model = onnx.shape_inference.infer_shapes(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return convert_float_to_float16(model, keep_io_types=False, disable_shape_infer=True)


CHILD = r"""
import json, sys
spec = json.loads(sys.argv[1])
import numpy as np, onnx, onnxruntime as ort
from plus_ep.verification.emulator import Emulator
from plus_ep.library import get_library_path
emu = Emulator.get()
emu.register_model(onnx.load(spec["model"]))
emu.set_arch(spec["arch"])
so = ort.SessionOptions()
so.register_custom_ops_library(get_library_path())
so.log_severity_level = 3
feeds = dict(np.load(spec["feeds"]))
sess = ort.InferenceSession(spec["model"], so, providers=["CPUExecutionProvider"])
names = [o.name for o in sess.get_outputs()]
try:
    got = sess.run(None, feeds)
    error = None
except Exception as e:
    got, error = [], " ".join(str(e).split())[:2000]
np.savez(spec["out"], **dict(zip(names, got)))
from tests.support.emulated_models import module_owners
owner = module_owners(emu)
key_of = dict(emu.load_order)
def persistent(r):               # the warp-specialised TMA GEMM: its CTAs take work units, not grid cells
    info = emu.registry.get(key_of.get(r.module, ""))
    return bool(info and r.entry == "plus_gemm" and "cp.async.bulk.tensor" in (info.ptx or ""))
launches = [[owner.get(r.module, r.node), r.entry, list(r.grid), r.error, [str(f) for f in r.findings][:3],
             round(r.seconds, 3), list(r.block), r.smem, persistent(r)] for r in emu.records]
print(json.dumps({"error": error, "launches": launches, "live_allocations": emu.live_allocations()}))
"""


@dataclass
class KernelRun:
    outputs: dict = field(default_factory=dict)   # arch -> {output name: array} through the kernels
    launches: dict = field(default_factory=dict)  # arch -> [[node, entry, grid, error, findings, seconds, block, smem,
    #                                                          persistent TMA GEMM]]
    fused: list = field(default_factory=list)     # names of the Fused nodes
    rewritten: onnx.ModelProto | None = None


def rewrite_with_kernels(model: onnx.ModelProto, archs, fp32_math="exact"):
    import plus_ep
    r = plus_ep.rewrite_detailed(model, archs=list(archs), fp32_math=fp32_math, progress=False)
    assert not r.kernels.failures, r.kernels.failures
    return r


def run_on_kernels(model: onnx.ModelProto, feeds: dict, archs=("sm_80",), fp32_math="exact",
                   timeout: int = 900) -> KernelRun:
    """Rewrite `model` with kernels for `archs` and run it through them, one child per arch."""
    from tests.support.emulated_models import child_env
    r = rewrite_with_kernels(model, archs, fp32_math)
    fused = [n.name for n in r.model.graph.node if n.domain == "ai.plus_ep"]      # Fused and FusedHost<n>
    run = KernelRun(fused=fused, rewritten=r.model)
    with tempfile.TemporaryDirectory(prefix="plus_ep_kernel_models_") as tmp:
        tmp = Path(tmp)
        onnx.save(r.model, tmp / "model.onnx")
        np.savez(tmp / "feeds.npz", **feeds)
        for arch in archs:
            spec = {"model": str(tmp / "model.onnx"), "feeds": str(tmp / "feeds.npz"), "arch": arch,
                    "out": str(tmp / f"out_{arch}.npz")}
            p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)], capture_output=True, text=True,
                               check=False, env=child_env(), timeout=timeout, cwd=str(ROOT))
            assert p.returncode == 0, f"child exited with {p.returncode} (a crash is a failure)\n{p.stderr[-4000:]}"
            res = json.loads(p.stdout.strip().splitlines()[-1])
            assert res["error"] is None, f"{arch}: {res['error']}"
            assert res["live_allocations"] == 0, res["live_allocations"]
            with np.load(spec["out"]) as z:
                run.outputs[arch] = {k: z[k] for k in z.files}
            run.launches[arch] = res["launches"]
    return run


def round_weights_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    """The fp32 model whose weights are the float16 model's (the reference of a float16 run)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for k, t in enumerate(out.graph.initializer):
        if t.data_type == TensorProto.FLOAT:
            a = numpy_helper.to_array(t)
            out.graph.initializer[k].CopyFrom(numpy_helper.from_array(a.astype(np.float16).astype(np.float32), t.name))
    return out


def check_model_on_kernels(model, feeds, archs, math, fp32_math="exact"):
    """Run `model` (fp32) through its kernels in `math` (exact / tf32 / fp16) on `archs` and check every
    launch and every output element; returns the KernelRun."""
    import onnxruntime as ort

    from plus_ep.verification.bounds import UNIT, assert_within, element_bound, sensitivity
    ref_model = round_weights_fp16(model) if math == "fp16" else model
    run_model = to_fp16(ref_model) if math == "fp16" else ref_model
    run = run_on_kernels(run_model, feeds, archs=archs, fp32_math=fp32_math)
    spread = sensitivity(ref_model, feeds, UNIT[math])
    sess = ort.InferenceSession(ref_model.SerializeToString(), providers=["CPUExecutionProvider"])
    reference = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    for arch in archs:
        launches = run.launches[arch]
        bad = [ln for ln in launches if ln[3] or ln[4]]
        assert not bad, bad                                    # no interpreter error, no checker finding
        assert {ln[0] for ln in launches} == set(run.fused), (sorted({ln[0] for ln in launches}), run.fused)
        for name, ref in reference.items():
            assert_within(run.outputs[arch][name], ref, element_bound(ref, spread[name], math),
                          f"{arch} {math} output {name}")
    return run
