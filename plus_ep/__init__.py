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


def _source_tree_root():
    """The checkout this package sits in when it is imported from a source tree, else None.

    The product card keeps graph_rewrites/, kernels/ and warehouse/ beside plus_ep/; an install maps them to
    plus_ep.graph_rewrites, plus_ep.kernels and plus_ep.warehouse (pyproject's package-dir). With the checkout
    on __path__, a bare source tree has the same names without pip: `PYTHONPATH=<checkout> python -c ...`.
    """
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    if (root / "pyproject.toml").is_file() and all((root / d / "__init__.py").is_file()
                                                   for d in ("graph_rewrites", "kernels", "warehouse")):
        return str(root)
    return None


_ROOT = _source_tree_root()
if _ROOT is not None:
    __path__.append(_ROOT)

import sys as _sys  # noqa: E402
import types as _types  # noqa: E402

from .library import get_ep_name, get_ep_names, get_library_path  # noqa: E402
from .ep import get_ep_devices, register  # noqa: E402
from . import ep as _ep  # noqa: E402

# The rewriter (onnx, sympy, the warehouse) and the session class load on first use, so that `import plus_ep`
# costs little more than the `import onnxruntime` it needs to register the EP.
_LAZY = {"rewrite": "rewrite", "rewrite_detailed": "rewrite", "load_model": "rewrite", "RewriteResult": "rewrite",
         "InferenceSession": "session"}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'plus_ep' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


class _Package(_types.ModuleType):
    """`plus_ep.rewrite` is the function, as it always was, though the rewriter now loads lazily: when the
    import system binds the submodule plus_ep.rewrite to the package (on `from plus_ep.rewrite import ...`),
    the name is left to the function (loaded on first use by __getattr__)."""

    def __setattr__(self, name, value):
        if name == "rewrite" and isinstance(value, _types.ModuleType):
            return
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package



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

__all__ = ["InferenceSession", "RewriteResult", "get_ep_devices", "get_ep_name", "get_ep_names", "get_library_path",
           "load_model", "rewrite",
           "rewrite_detailed", "register", "verify", "verify_text", "__version__"]
