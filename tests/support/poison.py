"""Poisoned output buffers: every kernel test writes into memory that starts as all-ones bytes and checks
every element, so an element no kernel wrote fails instead of passing as a stale 0.

All-ones (0xFF in every byte) is NaN in every float width (f16, bf16, f32, f64) with a payload the PTX
interpreter never produces (its arithmetic returns the canonical NaNs 0x7FFF / 0x7FFFFFFF,
kernels/ptx/semantics.py), so even where the reference itself is NaN (a fully masked attention row
without the graph's guard) an unwritten element is told apart from a written NaN by its bits. In an
integer output it is -1 in every signed width: those outputs are compared exactly with their reference,
which catches an unwritten element unless the reference is -1 there. The emulated CUDA driver fills
every cuMemAlloc the same way (plus_ep/native/emucuda.c), so outputs of models run through the launcher
are poisoned too.

    out = poisoned_like(want)           # host array to upload as the output buffer
    assert_written(got, "output y")     # after the kernel: no element still holds the poison
"""
from __future__ import annotations

import numpy as np

from plus_ep.verification.bounds import POISON_BYTE, unwritten  # noqa: F401 - the one owner of the poison test


def poisoned_like(like: np.ndarray) -> np.ndarray:
    """An array of `like`'s shape and dtype whose every byte is POISON_BYTE."""
    like = np.asarray(like)
    return np.full(like.nbytes, POISON_BYTE, np.uint8).view(like.dtype).reshape(like.shape)


def assert_written(got: np.ndarray, what: str = "output", want: np.ndarray | None = None) -> None:
    """Fail when an element of `got` still holds the poison. For integer outputs, where -1 is a value,
    pass `want` (the reference): only elements whose reference is not -1 count."""
    got = np.asarray(got)
    bad = unwritten(got)
    if got.dtype.kind in "iub" and want is not None:
        bad &= np.asarray(want).astype(np.int64) != -1
    if bad.any():
        where = np.argwhere(bad)
        raise AssertionError(f"{what}: {int(bad.sum())} of {got.size} elements never written by the kernel "
                             f"(still the 0x{POISON_BYTE:02X} poison); first at {tuple(int(i) for i in where[0])}")
