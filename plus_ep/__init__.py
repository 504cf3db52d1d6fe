"""PlusEP: PluS-style pluggable graph fusion for ONNX Runtime.

    import plus_ep
    fused = plus_ep.rewrite("model.onnx")        # ModelProto with ai.plus_ep::Fused nodes

The rewritten model runs anywhere ONNX Runtime does (fused nodes inline their original bodies);
kernels and the native launcher plug in behind the same nodes.
"""
from .rewrite import RewriteResult, load_model, rewrite, rewrite_detailed

__version__ = "0.1.0"
__all__ = ["RewriteResult", "load_model", "rewrite", "rewrite_detailed", "__version__"]
