"""Census of PTX forms: which opcode-with-modifiers strings a PTX text uses, and which of them the
interpreter cannot decode (each with the first PTX line where it occurs and the reason).

    from plus_ep.kernels.ptx.census import forms, missing
    forms(ptx_text)        # Counter({"ld.global.nc.v4.f32": 26, ...})
    missing(ptx_text)      # {"tanh.approx.f32": (812, "unsupported PTX form ...")}
    census(ptx_text)       # both, parsing once
"""
from __future__ import annotations

from collections import Counter

from . import ops_alu, ops_cluster, ops_mem, ops_warp, tensorcore  # noqa: F401  (register the handlers)
from .decode import decode
from .errors import PtxError
from .parse import parse


def statements(ptx_text: str):
    for fn in parse(ptx_text).functions.values():
        yield from fn.stmts


def forms(ptx_text: str) -> Counter:
    return Counter(st.opcode for st in statements(ptx_text))


def missing(ptx_text: str) -> dict:
    """form -> (first PTX line, reason) for every statement that does not decode."""
    return census(ptx_text)[1]


def census(ptx_text: str) -> tuple[Counter, dict]:
    """(forms, missing) of one PTX text, parsed once."""
    count, out = Counter(), {}
    for st in statements(ptx_text):
        count[st.opcode] += 1
        if st.opcode in out:
            continue
        try:
            decode(st)
        except PtxError as e:
            out[st.opcode] = (st.line, str(e))
    return count, out
