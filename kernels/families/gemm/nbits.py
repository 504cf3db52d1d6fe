"""Weight-only quantised GEMM (MatMulNBits, onnxruntime-genai's int4 weights): the gemm template with
PLUS_B_NBITS, whose B operand is decoded in the mainloop from the packed weights instead of read as a
dense matrix (gemm.cuh, plus_b_chunk).

A subgraph gets here when identification's post-pass (graph_rewrites/contrib/decoders.py) found that its
GEMM's B is the dequantisation chain of a MatMulNBits expansion and moved that chain into the subgraph
(the roles' `nbits`): the fused node then reads the packed uint8 weights, the scales and the zero points,
never a dequantised copy. Element k of column n is ``(q[n,k] - zp[n, k // block]) · scale[n, k // block]``
with q the k-th `bits`-wide field of column n's packed row (low bits first), zp 2^(bits-1) by default,
packed like q (uint8) or in the scales' type; the decoded value is rounded to the activations' type
before the MMA, as a dequantised weight tensor of that type would be.

Routes use the mma.sync / SIMT menus (gemm.cuh) on every arch, sm_90a included: the wgmma template has no
decoding loader (weight-only GEMMs are memory-bound at decode sizes, where the mma.sync kernel suffices).
"""
from __future__ import annotations

from onnx import TensorProto

from ....graph_rewrites.contrib.decoders import LAYOUT
from ...codegen import dtypes
from ...codegen.pull import RenderError


def check(nb: dict) -> None:
    if nb["bits"] not in (2, 4, 8) or nb["block_size"] % 8:
        raise RenderError(f"MatMulNBits bits={nb['bits']} block_size={nb['block_size']}: the decoding loader takes "
                          "2, 4 or 8 bits and a block size that is a multiple of 8")


def check_pair(nbs, where: str) -> None:
    """The two weights of a gated GEMM (gate, up) decoded in one mainloop: both quantised, one layout (their
    packed fields, scales and zero points may differ; each has its own)."""
    if len(nbs) != 2 or any(nb is None for nb in nbs):
        raise RenderError(f"{where}: one of the gate/up weights is a MatMulNBits weight and the other is not; "
                          "a gated GEMM decodes both or neither")
    got = [tuple(int(nb[k]) for k in LAYOUT) for nb in nbs]
    if got[0] != got[1]:
        raise RenderError(f"{where}: the gate and up MatMulNBits weights differ in layout ({', '.join(LAYOUT)} = "
                          f"{got[0]} vs {got[1]}); a gated GEMM decodes two weights of one layout")
    for nb in nbs:
        check(nb)


def chunk_hook(job, em, nb: dict, fn: str = "plus_b_chunk") -> str:
    """The template's plus_b_chunk (`fn`; plus_b1_chunk: B1 of a gated GEMM, gemm.cuh): W consecutive
    decoded elements of one column of B."""
    check(nb)
    K, bits, bs = int(nb["K"]), int(nb["bits"]), int(nb["block_size"])
    blocks = -(-K // bs)
    row = blocks * bs * bits // 8                      # packed bytes per column
    per, mask = 8 // bits, (1 << bits) - 1
    kq, ks = job.inputs.index(nb["packed"]), job.inputs.index(nb["scales"])
    scale = dtypes.load(em.dtype(nb["scales"]), f"args.in[{ks}]", f"n * {blocks}LL + blk")
    zp = nb.get("zero_points")
    if zp is None:
        z = f"{float(1 << (bits - 1))}f"
    else:
        kz = job.inputs.index(zp)
        if em.dtype(zp) == TensorProto.UINT8:
            zrow = -(-blocks * bits // 8)
            z = (f"(float)((((const unsigned char*)args.in[{kz}])[n * {zrow}LL + blk / {per}] >> "
                 f"((blk % {per}) * {bits})) & {mask})")
        else:
            z = dtypes.load(em.dtype(zp), f"args.in[{kz}]", f"n * {blocks}LL + blk")
    if per == 1:
        field = "(float)q[kk]"
    else:
        field = f"(float)((q[kk / {per}] >> ((kk % {per}) * {bits})) & {mask})"
    pad = " " * (len(fn) - len("plus_b_chunk"))
    return (
        ("#define PLUS_B_NBITS 1\n" if fn == "plus_b_chunk" else "")
        + "template <int W>\n"
        f"PLUS_DEV void {fn}(const PlusArgs& args, long long b, long long n, long long k, int avail,\n"
        f"                           {pad}float (&v)[W]) {{\n"
        "  (void)b;\n"
        f"  const unsigned char* q = (const unsigned char*)args.in[{kq}] + n * {row}LL;\n"
        f"  const long long blk = k / {bs};          // a chunk never straddles a quantisation block\n"
        f"  const float s = {scale};\n"
        f"  const float z = {z};\n"
        "#pragma unroll\n"
        "  for (int j = 0; j < W; ++j) {\n"
        "    const long long kk = k + j;              // inside the packed row even past K: whole blocks\n"
        f"    v[j] = j < avail ? ({field} - z) * s : 0.f;\n"
        "  }\n"
        "}\n")
