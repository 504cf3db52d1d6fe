"""ONNX Runtime's own fusions, computed offline: the graph after ORT's optimizer (ORT_ENABLE_ALL) and
after the `onnxruntime.transformers` optimizer, for comparison with PlusEP.

    model, info = ort_enable_all("model.onnx", cuda=cuda_ep_probe()["available"])
    opt, info = transformers_optimizer("model.onnx", "bert", num_heads=12, hidden_size=768)
    model, info16 = to_fp16(opt)                           # then in place to fp16

ORT_ENABLE_ALL fusions depend on the execution provider that owns each node: ORT only saves the
graph that the session's providers produced (`SessionOptions.optimized_model_filepath`). There is
no offline mode for another provider: asking for the CUDA EP without a GPU (or without its CUDA
libraries) makes ORT log an error and fall back to the CPU EP, so the saved graph holds the CPU
EP's fusions. `cuda_ep_probe` says which case applies; the benchmark records it.

The transformers optimizer runs with use_gpu=False and opt_level=1: level 1 (constant folding,
redundant-node removal) is provider-independent, while higher levels would bake the CPU EP's
fusions into the graph. Its Python fusions (Attention, SkipLayerNormalization, BiasGelu, ...) do
not depend on the provider.
"""
from __future__ import annotations

import logging
import os
import tempfile
import time
import traceback
from collections import Counter

import onnx

STANDARD_DOMAINS = ("", "ai.onnx")
OPT_LEVEL = 1

# family -> (ORT transformers model_type, why this one)
MODEL_TYPES = {
    "bert": ("bert", "BERT encoder"),
    "albert": ("bert", "ORT lists albert-* checkpoints with model_type bert "
                       "(onnxruntime/transformers/huggingface_models.py)"),
    "gpt2": ("gpt2", "GPT-2 decoder"),
    "t5": ("t5", "T5 encoder-decoder"),
    "vit": ("vit", "ViT encoder"),
    "llama": ("gpt2", "ORT has no llama model_type; its own Llama recipe "
                      "(onnxruntime/transformers/models/llama/convert_to_onnx.py) uses gpt2"),
}


def fused_ops(model: onnx.ModelProto) -> dict:
    """Histogram of the nodes outside the default ONNX domain (ORT's contrib and layout ops)."""
    return dict(Counter(f"{n.domain}::{n.op_type}" for n in model.graph.node
                        if n.domain not in STANDARD_DOMAINS).most_common())


def error_text(exc: BaseException) -> str:
    """One line: the exception and the innermost frame it came from (optimizer errors such as a
    bare IndexError mean nothing without it)."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
    text = " ".join(str(exc).split())[:300]
    return f"{type(exc).__name__}: {text}{where}"


def cuda_ep_probe() -> dict:
    """Whether an ORT session really gets the CUDA EP here (tried on a one-node model). ORT falls
    back to the CPU EP when it cannot create the CUDA EP and only logs why, to the process's stderr,
    which is captured for the note."""
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return {"available": False, "note": "this onnxruntime build has no CUDAExecutionProvider"}
    h = onnx.helper
    x = h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])
    y = h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])
    tiny = h.make_model(h.make_graph([h.make_node("Relu", ["x"], ["y"])], "probe", [x], [y]),
                        opset_imports=[h.make_opsetid("", 17)], ir_version=8)
    failure = "no reason logged"
    with _StderrCapture() as err:
        try:
            got = ort.InferenceSession(tiny.SerializeToString(),
                                       providers=["CUDAExecutionProvider"]).get_providers()
        except Exception as exc:
            got, failure = [], error_text(exc)
    if "CUDAExecutionProvider" in got:
        return {"available": True, "note": "CUDA EP created: ORT_ENABLE_ALL graphs are the CUDA EP's"}
    reason = next((ln for ln in err.lines if "Failed to load library" in ln or "Failed to create" in ln),
                  failure)
    return {"available": False,
            "note": f"ORT could not create the CUDA EP ({_short(reason)}) and fell back to {got or 'nothing'}; "
                    "ORT saves only the graph its session's providers produced, so no CUDA-EP-optimized "
                    "model can be saved offline and the ORT_ENABLE_ALL graphs here are the CPU EP's"}


def _short(line: str) -> str:
    """'...with error: libcublasLt.so.13: cannot open shared object file: ...' -> the cause."""
    line = line.split("with error:", 1)[-1] if "with error:" in line else line.split("]", 1)[-1]
    return " ".join(line.split())[:160]


class _StderrCapture:
    """Redirect file descriptor 2 (where ORT's C++ logger writes) into a temporary file."""

    def __enter__(self):
        import sys
        sys.stderr.flush()
        self._tmp = tempfile.TemporaryFile(mode="w+b")
        self._saved = os.dup(2)
        os.dup2(self._tmp.fileno(), 2)
        self.lines: list[str] = []
        return self

    def __exit__(self, *exc):
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._tmp.seek(0)
        text = self._tmp.read().decode(errors="replace")
        self._tmp.close()
        self.lines = [ln for ln in text.splitlines() if ln.strip()]
        return False


def ort_enable_all(path, cuda: bool = False) -> tuple[onnx.ModelProto, dict]:
    """The graph ORT runs after ORT_ENABLE_ALL on the CUDA EP (with `cuda`) or the CPU EP.
    Weights go to an external file that is deleted: the returned model is the graph only."""
    import onnxruntime as ort

    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if cuda else ["CPUExecutionProvider"]
    with tempfile.TemporaryDirectory(prefix="plus_ep_ort_all_") as tmp:
        out = os.path.join(tmp, "optimized.onnx")
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.optimized_model_filepath = out
        so.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                    "optimized.onnx.data")
        so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes",
                                    "1024")
        start = time.perf_counter()
        sess = ort.InferenceSession(os.fspath(path), so, providers=providers)
        seconds = time.perf_counter() - start
        ep = sess.get_providers()[0]
        del sess
        model = onnx.load(out, load_external_data=False)
    return model, {"ep": ep, "seconds": round(seconds, 3), "fused_ops": fused_ops(model)}


def transformers_optimizer(path, family: str, num_heads: int, hidden_size: int):
    """`onnxruntime.transformers.optimizer.optimize_model` with the model type for `family`.
    Returns (the optimizer's OnnxModel, info), or (None, {"not_supported": reason}) when ORT has no
    model type for it. The graph is `opt.model`; `to_fp16(opt)` converts it afterwards."""
    from onnxruntime.transformers import optimizer as ort_optimizer

    if family not in MODEL_TYPES:
        return None, {"not_supported": f"no ORT transformers model type is known for {family!r}"}
    model_type, why = MODEL_TYPES[family]
    if model_type not in ort_optimizer.MODEL_TYPES:
        return None, {"not_supported": f"this onnxruntime has no model type {model_type!r}"}
    info = {"model_type": model_type, "model_type_note": why, "opt_level": OPT_LEVEL, "use_gpu": False,
            "num_heads": num_heads, "hidden_size": hidden_size}
    with _Quiet() as quiet:
        start = time.perf_counter()
        opt = ort_optimizer.optimize_model(os.fspath(path), model_type=model_type, num_heads=num_heads,
                                           hidden_size=hidden_size, opt_level=OPT_LEVEL, use_gpu=False)
        info["seconds"] = round(time.perf_counter() - start, 3)
    info["fused_ops"] = fused_ops(opt.model)
    info["warnings"] = quiet.messages[:10]
    return opt, info


def to_fp16(opt) -> tuple[onnx.ModelProto, dict]:
    """The optimizer's fp16 conversion as ORT recommends it for GPUs (keep_io_types=True), in place."""
    with _Quiet():
        start = time.perf_counter()
        opt.convert_float_to_float16(keep_io_types=True)
        seconds = time.perf_counter() - start
    return opt.model, {"seconds": round(seconds, 3)}


class _Quiet:
    """Collect the optimizer's warnings (it logs every pattern it cannot match) instead of printing
    them: its loggers have no handlers of their own and propagate to the root logger."""

    def __init__(self):
        self.messages: list[str] = []
        self._handler = logging.Handler(logging.WARNING)
        self._handler.emit = lambda rec: self.messages.append(" ".join(rec.getMessage().split())[:200])
        self._saved = None

    def __enter__(self):
        root = logging.getLogger()
        self._saved = root.handlers[:]
        root.handlers = [self._handler]
        return self

    def __exit__(self, *exc):
        logging.getLogger().handlers = self._saved
        return False
