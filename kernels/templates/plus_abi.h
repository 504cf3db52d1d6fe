/* plus_abi.h: the launch ABI every generated kernel and the C launcher share, kernels/CONTRACT.md
 * sections 1 and 3: the argument struct PlusArgs and the launcher's limits, in one place.
 * plus_common.cuh includes it by name, NVRTC has this folder first on its include path;
 * plus_ep/native/plan.h includes it by its path in the repository. Plain C and CUDA C++, no other
 * includes. plus_ep/limits.py mirrors every PLUS_MAX_* for the rewriter and the codegen, and
 * tests/cpu/test_abi.py checks that the two agree. */
#ifndef PLUS_ABI_H
#define PLUS_ABI_H

/* PlusArgs: the one parameter of every entry point, passed by value. */
#define PLUS_MAX_IN 64
#define PLUS_MAX_OUT 8
#define PLUS_MAX_SCRATCH 4
#define PLUS_MAX_V 32
typedef struct PlusArgs {
    const void* in[PLUS_MAX_IN];
    void* out[PLUS_MAX_OUT];
    void* scratch[PLUS_MAX_SCRATCH];
    long long v[PLUS_MAX_V];
} PlusArgs;
#ifdef __cplusplus
static_assert(sizeof(PlusArgs) == 864, "PlusArgs layout is shared by the kernels and the C launcher");
#else
_Static_assert(sizeof(PlusArgs) == 864, "PlusArgs layout is shared by the kernels and the C launcher");
#endif

/* Limits of a plan, fixed so that a run needs no heap memory. */
#define PLUS_MAX_RANK 8
#define PLUS_MAX_SYM 32
#define PLUS_MAX_ROUTES 32
#define PLUS_MAX_KERNELS 64   /* kernel lines, all routes together */
#define PLUS_MAX_GROUPS 8     /* `arch` records: route groups for the packs of some archs */
#define PLUS_MAX_ARCHS 24
#define PLUS_MAX_STACK 32     /* expression evaluation depth */
#define PLUS_MAX_SHAPEV 16    /* `shapev` lines: symbols bound from the values of shape tensors */
#define PLUS_MAX_EQUAL 32     /* `equal` lines: dims a rewrite assumed equal */
#define PLUS_MAX_TMAP_LINES 32  /* `tmap` records, all kernel lines together (tmap.h) */

#endif
