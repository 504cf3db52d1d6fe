"""The contenders: one small class each, one interface.

    runner = CONTENDERS["plus_ep"].prepare(ctx, feeds, out_shapes)   # measures cold + warm start
    bound = runner.bind(feeds, out_shapes)     # device-resident inputs/outputs (IOBinding for ORT)
    bound.run(); bound.sync(); bound.outputs()

``prepare`` starts the contender twice and keeps the second: ``create_cold_s`` / ``create_warm_s`` are
the times from nothing to a first finished inference, the first time in this process and again
(warm caches: PlusEP's model and kernel cache, Inductor's, the OS file cache). ``skip_reason(ctx)``
says why a contender cannot run on this machine. ``ctx`` is a ``bench.harness.store.Context``.
"""
from __future__ import annotations

import numpy as np

from bench.harness import measure
from bench.harness.contenders_ort import Ort, OrtBound, OrtOptimizer, PlusEP, cuda_ep, providers_for, session_options
from bench.harness.contenders_torch import Torch


def warm_process(device):
    """Pay the process's one-time costs (CUDA context, cuBLAS handles, ORT's EP libraries, torch's
    allocator) before any contender is measured, so the first one measured is not charged for them."""
    import onnxruntime as ort
    from onnx import TensorProto, helper
    import torch
    if device == "cuda" and not cuda_ep():     # CPU onnxruntime: nothing of ORT's to warm on the GPU
        a = torch.ones(64, 64, device=device)
        (a @ a).sum().item()
        measure.release()
        return
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 64])
    w = helper.make_tensor("w", TensorProto.FLOAT, [64, 64], np.eye(64, dtype=np.float32).ravel().tolist())
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Softmax", ["h"], ["y"])],
                          "warm", [x], [y], [w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    sess = ort.InferenceSession(model.SerializeToString(), session_options(), providers=providers_for(device, False))
    if device == "cuda" and sess.get_providers()[0] != "CUDAExecutionProvider":
        raise SystemExit(f"bench: ONNX Runtime's CUDA EP did not load (session providers {sess.get_providers()}); "
                         "are its CUDA and cuDNN libraries found?")
    bound = OrtBound(sess, {"x": np.ones((8, 64), np.float32)}, {"y": (8, 64)}, device, None)
    bound.run()
    bound.sync()
    a = torch.ones(64, 64, device=device)
    (a @ a).sum().item()
    del bound, sess
    measure.release()


CONTENDERS = {c.name: c for c in (
    Ort("ort"),
    OrtOptimizer("ort_optimizer"),
    Ort("ort_cuda_graph", graph=True),
    Torch("torch_eager"),
    Torch("torch_compile", mode="default"),
    Torch("torch_compile_max_autotune", mode="max-autotune", needs_gpu=True),
    PlusEP("plus_ep"),
    PlusEP("plus_ep_cuda_graph", graph=True),
)}
ORT_CONFIGS = ("ort", "ort_optimizer", "ort_cuda_graph")
COMPILE_CONFIGS = ("torch_compile", "torch_compile_max_autotune")
PLUS_CONFIGS = ("plus_ep", "plus_ep_cuda_graph")
