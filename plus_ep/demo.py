"""`plus-ep demo`: build a small BERT (no torch), rewrite it with kernels, print the fusion report,
run its kernels on the CPU PTX interpreter through the launcher and check them (plus_ep.verify), and
with a GPU compare PlusEP against the plain CUDA EP. The kernel check runs every CTA of every launch
in Python, so its default shape is small (1 layer, batch 1, seq 8)."""
from __future__ import annotations

import time

import numpy as np
import onnxruntime as ort

from . import demo_model
from .report import report
from .report_text import format_rewrite_report
from .rewrite import rewrite_detailed


def _median_ms(sess, feeds, runs=50) -> float:
    sess.run(None, feeds)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t) * 1e3)
    return float(np.median(times))


def _diff(a, b) -> float:
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b))


def run(layers=1, batch=2, seq=128, archs=None, out=print, verify_kernels=True, verify_batch=1,
        verify_seq=8) -> dict:
    from .kernels.compile import nvrtc
    model = demo_model.build_bert(layers=layers)
    local = nvrtc.local_arch()
    archs = archs or ([local] if local in nvrtc.ARCHS else ["sm_80"])
    out(f"demo BERT: {layers} layers, hidden 256, 4 heads ({len(model.graph.node)} ONNX nodes); "
        f"kernels for {','.join(archs)}")
    result = rewrite_detailed(model, archs=archs)
    rep = report(result)
    out(format_rewrite_report(rep, "demo BERT"))
    k = result.kernels
    out(f"kernels: {len(k.attrs)} fused subgraphs with kernels ({k.compiled} compiled, {k.cached} cached, "
        f"{k.seconds:.1f}s), {len(k.failures)} left unfused")
    summary = {"archs": archs}
    if verify_kernels:
        from .verification.check import verify, verify_text
        out(f"Kernel check on the CPU: the rewritten model on ORT CPU through the launcher, every kernel's PTX "
            f"executed on PlusEP's PTX interpreter (emulated CUDA driver, checkers on); each fused node's "
            f"outputs vs its function body on the same inputs, the model's outputs vs the original graph; "
            f"batch {verify_batch}, seq {verify_seq}, {','.join(archs)}")
        rep = verify(result.model, archs=archs, batch=verify_batch, seq=verify_seq)
        out(verify_text(rep))
        summary.update(kernels_verified=rep["ok"], verify=rep["summary"])
    feeds = demo_model.sample_inputs(batch=batch, seq=seq)
    if local is None or "CUDAExecutionProvider" not in ort.get_available_providers():
        out("GPU comparison skipped: no CUDA GPU/driver or no CUDAExecutionProvider here "
            + ("(the kernels ran on the CPU PTX interpreter above, not on a GPU)" if verify_kernels
               else "(PlusEP kernels were compiled but not run)"))
        return summary
    from .session import InferenceSession
    plain = ort.InferenceSession(model.SerializeToString(), providers=["CUDAExecutionProvider"])
    plus = InferenceSession(model.SerializeToString(), providers=[("PlusEP", {"arch": archs[0]}),
                                                                  "CUDAExecutionProvider"])
    diff = _diff(plain.run(None, feeds), plus.run(None, feeds))
    t_plain, t_plus = _median_ms(plain, feeds), _median_ms(plus, feeds)
    summary.update(gpu_max_diff=diff, cuda_ep_ms=t_plain, plus_ep_ms=t_plus, speedup=t_plain / t_plus)
    out(f"GPU: PlusEP vs CUDA EP max |diff| = {diff:.2e}; CUDA EP {t_plain:.3f} ms, PlusEP {t_plus:.3f} ms, "
        f"speed-up {t_plain / t_plus:.2f}x (median of 50 runs)")
    return summary
