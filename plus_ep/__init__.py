"""PlusEP: PluS-style pluggable graph fusion for ONNX Runtime.

    import plus_ep
    fused = plus_ep.rewrite("model.onnx")        # ModelProto with ai.plus_ep::Fused nodes
    sess = plus_ep.InferenceSession("model.onnx", providers=["PlusEP", "CUDAExecutionProvider"])

    import onnxruntime                           # the stock class knows "PlusEP" once plus_ep is imported
    sess = onnxruntime.InferenceSession("model.onnx", providers=["PlusEP", "CUDAExecutionProvider"])

The rewritten model runs anywhere ONNX Runtime does (fused nodes inline their original bodies);
kernels and the native launcher plug in behind the same nodes.
"""
__version__ = "0.1.0"

from .library import get_library_path  # noqa: E402
from .rewrite import RewriteResult, load_model, rewrite, rewrite_detailed  # noqa: E402
from .session import InferenceSession  # noqa: E402
from .ep import register  # noqa: E402
from . import ep as _ep  # noqa: E402



def verify(model, **kwargs) -> dict:
    """Run a rewritten model's kernels on the CPU PTX interpreter through the launcher and check them
    (`plus-ep verify`); see plus_ep.verification.check.verify. Returns the report; report["ok"] is the verdict."""
    from .verification.check import verify as _verify
    return _verify(model, **kwargs)


def verify_text(report: dict) -> str:
    """The table `plus-ep verify` prints for a report of plus_ep.verify."""
    from .verification.check import verify_text as _text
    return _text(report)


_ep.register_on_import()   # the "PlusEP" plugin EP for onnxruntime >= 1.25 (PLUS_EP_REGISTER=0: not)

__all__ = ["InferenceSession", "RewriteResult", "get_library_path", "load_model", "rewrite",
           "rewrite_detailed", "register", "verify", "verify_text", "__version__"]
