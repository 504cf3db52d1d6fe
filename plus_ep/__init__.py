"""PlusEP: PluS-style pluggable graph fusion for ONNX Runtime.

    import plus_ep
    fused = plus_ep.rewrite("model.onnx")        # ModelProto with ai.plus_ep::Fused nodes
    sess = plus_ep.InferenceSession("model.onnx", providers=["PlusEP", "CUDAExecutionProvider"])

The rewritten model runs anywhere ONNX Runtime does (fused nodes inline their original bodies);
kernels and the native launcher plug in behind the same nodes.
"""
__version__ = "0.1.0"

from .library import get_library_path  # noqa: E402
from .rewrite import RewriteResult, load_model, rewrite, rewrite_detailed  # noqa: E402
from .session import InferenceSession  # noqa: E402

__all__ = ["InferenceSession", "RewriteResult", "get_library_path", "load_model", "rewrite",
           "rewrite_detailed", "__version__"]
