"""The gemm template's hook sources (kernels/CONTRACT.md §2.1) and the GEMM-side tensors a row program
reads, shared by the GEMM renderers (render.py: plain, grouped and two-kernel GEMM + row program;
gemm_rownorm/tile.py: the one-kernel GEMM + row normalisation on sm_90a)."""
from __future__ import annotations

from ...codegen import dtypes
from ...codegen.pull import RenderError


def frontier(job, em, cout, row_nodes, dep_c, dep_row) -> list:
    """GEMM-side tensors the row program reads, minus those it can recompute from the others."""
    row_ids = {id(n) for n in row_nodes}
    reads = []
    for n in job.nodes:
        if id(n) in row_ids or any(o in dep_row for o in n.output):
            reads += [i for i in n.input if i and i in dep_c and i not in dep_row and i not in reads]

    def covered(t, keep):
        if t in keep or t not in dep_c:
            return True
        if t == cout or t not in em.producer:
            return False
        return all(covered(i, keep) for i in em.producer[t].input if i)
    keep = list(reads)
    for f in reversed(reads):
        others = [k for k in keep if k != f]
        if f != cout and f in em.producer and all(covered(i, others) for i in em.producer[f].input if i):
            keep.remove(f)
    if len(keep) > 4:
        raise RenderError(f"{job.node_name}: the row normalisation needs {len(keep)} GEMM-side tensors (max 4)")
    return keep


def gemm_hooks(em, M, N, K, nbatch, trans_b, ka, kb, a_off, b_off, dt) -> str:
    return hook_text(em, em.take(), M, N, K, em.c(nbatch), trans_b, dt, "b",
                      f"  return (const plus_ab_t*)args.in[{ka}] + {a_off('b')};\n",
                      f"  return (const plus_ab_t*)args.in[{kb}] + {b_off('b')};\n")


def hook_text(em, epilogue, M, N, K, batch_c, trans_b, dt, bvar, a_ptr, b_ptr, ldb=None, b1_ptr=None) -> str:
    """The gemm template's hooks; `bvar` names their batch parameter, `a_ptr`/`b_ptr`/`epilogue` are bodies.
    `ldb`: B's row stride (default N, or K with trans_b). `b1_ptr`: the body of plus_b1_ptr of a gated GEMM
    (PLUS_GATED 1), whose epilogue is plus_epilogue_gated(args, b, m, n, acc0, acc1)."""
    st = dtypes.storage(dt)
    ab = st if st != "float" else "float"
    ldb = (K if trans_b else N) if ldb is None else ldb
    acc_t = "int" if dt in dtypes.INT8 else "float"      # an 8-bit GEMM hands its exact s32 sum on
    if b1_ptr is None:
        epi = ("#define PLUS_HAS_EPILOGUE 1\n"
               f"PLUS_DEV void plus_epilogue(const PlusArgs& args, long long {bvar}, long long m, long long n, "
               f"{acc_t} acc) {{\n")
    else:
        epi = ("#define PLUS_HAS_B1_PTR 1\n"
               f"PLUS_DEV const plus_ab_t* plus_b1_ptr(const PlusArgs& args, long long {bvar}) {{\n{b1_ptr}}}\n"
               "#define PLUS_HAS_EPILOGUE_GATED 1\n"
               f"PLUS_DEV void plus_epilogue_gated(const PlusArgs& args, long long {bvar}, long long m, long long n, "
               "float acc0, float acc1) {\n")
    return (
        f"typedef {ab} plus_ab_t;\n"
        "#define PLUS_HAS_GEMM_SHAPE 1\n"
        "PLUS_DEV PlusGemmShape plus_gemm_shape(const PlusArgs& args) {\n"
        f"  return PlusGemmShape{{{batch_c}, {em.c(M)}, {em.c(N)}, {em.c(K)}}};\n}}\n"
        "#define PLUS_HAS_A_PTR 1\n"
        f"PLUS_DEV const plus_ab_t* plus_a_ptr(const PlusArgs& args, long long {bvar}) {{\n"
        f"{a_ptr}}}\n"
        "#define PLUS_HAS_LDA 1\n"
        f"PLUS_DEV long long plus_lda(const PlusArgs& args) {{ return {em.c(K)}; }}\n"
        "#define PLUS_HAS_B_PTR 1\n"
        f"PLUS_DEV const plus_ab_t* plus_b_ptr(const PlusArgs& args, long long {bvar}) {{\n"
        f"{b_ptr}}}\n"
        "#define PLUS_HAS_LDB 1\n"
        f"PLUS_DEV long long plus_ldb(const PlusArgs& args) {{ return {em.c(ldb)}; }}\n"
        f"{epi}{epilogue}\n}}\n")
