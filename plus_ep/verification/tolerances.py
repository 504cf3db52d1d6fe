"""Tolerances of `plus-ep verify`: how far a kernel's output may be from its reference, by math mode.

The error of an output is normalised by the reference's magnitude:

    max_abs = max |kernel - reference|          rel = max_abs / max |reference|

(a NaN or infinity where the reference has a different value makes rel infinite). `rel` must not
exceed the tolerance of the node's math mode:

| math   | what differs from ORT CPU                                   | node   | model outputs |
|--------|-------------------------------------------------------------|--------|---------------|
| exact  | fp32 everywhere; summation order, erf/exp/rsqrt last bits   | 2e-5   | 1e-4          |
| tf32   | GEMM operands rounded to 10 mantissa bits (2^-11 each)      | 5e-3   | 2e-2          |
| fp16   | f16 operands/outputs (2^-11 rounding), fp32 accumulation    | 1e-2   | 5e-2          |
| bf16   | bf16 operands/outputs (2^-8 rounding), fp32 accumulation    | 3e-2   | 1e-1          |

A node's math mode comes from what its kernels execute (the PTX: `mma` with `.tf32` operands is tf32)
and its element types (float16 / bfloat16 inputs or outputs). Model outputs take the loosest mode of
the model's nodes: errors of one node travel through the next ones.
"""
from __future__ import annotations

import numpy as np

TOLERANCES = {
    "exact": {"node": 2e-5, "model": 1e-4},
    "tf32": {"node": 5e-3, "model": 2e-2},
    "fp16": {"node": 1e-2, "model": 5e-2},
    "bf16": {"node": 3e-2, "model": 1e-1},
}
_ONNX_FLOAT16, _ONNX_BFLOAT16 = 10, 16


def node_math(ptx: str, onnx_dtypes) -> str:
    dtypes = set(onnx_dtypes)
    if _ONNX_BFLOAT16 in dtypes or ".bf16" in ptx and "mma" in ptx:
        return "bf16"
    if _ONNX_FLOAT16 in dtypes:
        return "fp16"
    if ".tf32" in ptx:
        return "tf32"
    return "exact"


def tolerance(math: str, dtype=None, kind: str = "node") -> float:
    tol = TOLERANCES[math][kind]
    if dtype is not None and np.dtype(dtype) == np.float16:
        tol = max(tol, TOLERANCES["fp16"][kind])
    return tol


def compare(kernel: np.ndarray, reference: np.ndarray) -> dict:
    """max_abs and rel (see the module doc) of kernel against reference, plus the worst element."""
    k = np.asarray(kernel)
    r = np.asarray(reference)
    if k.shape != r.shape:
        return {"max_abs": float("inf"), "rel": float("inf"), "shape": list(k.shape),
                "note": f"shape {list(k.shape)} differs from the reference's {list(r.shape)}"}
    if k.dtype.kind not in "fc":
        same = bool(np.array_equal(k, r))
        return {"max_abs": 0.0 if same else float("inf"), "rel": 0.0 if same else float("inf"),
                "shape": list(k.shape)}
    k64, r64 = k.astype(np.float64), r.astype(np.float64)
    if k.size == 0:
        return {"max_abs": 0.0, "rel": 0.0, "shape": list(k.shape)}
    fin = np.isfinite(r64)
    nonfinite_mismatch = bool(np.any(~fin & ~((k64 == r64) | (np.isnan(k64) & np.isnan(r64)))))
    diff = np.where(fin, np.abs(k64 - r64), 0.0)
    diff = np.where(np.isnan(diff), np.inf, diff)
    max_abs = float(diff.max())
    scale = float(np.abs(np.where(fin, r64, 0.0)).max())
    rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
    if nonfinite_mismatch:
        rel = max_abs = float("inf")
    worst = np.unravel_index(int(np.argmax(diff)), diff.shape)
    return {"max_abs": max_abs, "rel": rel, "shape": list(k.shape), "scale": scale,
            "worst": [int(i) for i in worst], "worst_kernel": float(k64[worst]), "worst_ref": float(r64[worst])}
