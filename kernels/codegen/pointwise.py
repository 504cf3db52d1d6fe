"""Point-wise kernels: each output element pulled from the subgraph inputs (grid-stride loop).

Used for element-wise subgraphs, and for the side outputs of other templates that do not depend on
the template's result (e.g. an attention mask that later layers reuse): as kernels of their own, or as a
loop the template's own threads run (`device_loop`, no extra launch)."""
from __future__ import annotations

from . import dtypes, symdim
from .pull import Emitter

THREADS = 256
MAX_BLOCKS = 8192


def bounds(threads: int) -> str:
    """Launch bounds of a row or point-wise kernel of `threads` per block: PLUS_BOUNDS (plus_common.cuh),
    which kernels/compile/jobs.py relaxes to one block per SM for a kernel that spills."""
    return f"PLUS_BOUNDS({threads})"


def render(em: Emitter, outputs: dict, entry: str) -> tuple[str, object]:
    """Kernel `entry` computing tensors `outputs` (name -> (pointer expr, dtype)), all of one shape.
    Returns (source, element count expression)."""
    body, n = _loop_body(em, outputs)
    src = (f'extern "C" __global__ void {bounds(THREADS)} {entry}(const PlusArgs args) {{\n'
           f"  const long long n = {em.c(n)};\n"
           f"  for (long long q = (long long)blockIdx.x * {THREADS} + threadIdx.x; q < n;\n"
           f"       q += (long long)gridDim.x * {THREADS}) {{\n{body}\n  }}\n}}\n")
    return src, n


def device_loop(em: Emitter, outputs: dict) -> str:
    """The same computation as a block of a device function whose caller hands every thread `first` and
    `stride` (another template's threads computing side outputs, e.g. attention.cuh's plus_attn_side)."""
    body, n = _loop_body(em, outputs)
    return (f"  {{\n    const long long n = {em.c(n)};\n"
            f"    for (long long q = first; q < n; q += stride) {{\n{body}\n    }}\n  }}\n")


def _loop_body(em: Emitter, outputs: dict) -> tuple[str, object]:
    """(the statements computing element q of every output, element count expression)."""
    names = list(outputs)
    shape = em.shape(names[0])
    n = symdim.numel(shape)
    em.reset()
    em.indent = "    "
    idx = [f"i{k}" for k in range(len(shape))]
    for k, e in enumerate(em.delinear("q", shape)):
        em.emit(f"const long long i{k} = {e};")
    for t in names:
        ptr, dt = outputs[t]
        val, ct = em.value(t, idx)
        em.emit(dtypes.store(dt, ptr, "q", dtypes.convert(val, ct, dtypes.compute(dt))))
    return em.take(), n


def launch(syms, n):
    return (f"{syms.rpn(n)},{THREADS},cdiv,{MAX_BLOCKS},min", "1", "1"), (str(THREADS), "1", "1"), "0"
