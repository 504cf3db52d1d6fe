/* Tensor maps (TMA descriptors) of a plan's kernel lines (kernels/CONTRACT.md §3, `tmap` records): parsing the
 * records, proving at bind time that every map lies inside its tensor, and encoding the maps with the driver's
 * cuTensorMapEncodeTiled before a launch. A kernel line with maps takes them as its second parameter: one
 * __grid_constant__ struct of PLUS_TMAP_BYTES-byte maps, 64-byte aligned, in record order. */
#ifndef PLUS_TMAP_H
#define PLUS_TMAP_H

#include <stddef.h>
#include <stdint.h>

#include "driver.h"
#include "plan.h"

#define PLUS_MAX_TMAPS PLUS_MAX_TMAP_LINES   /* tmap records, all kernel lines together */
#define PLUS_TMAPS_PER_KERNEL 8
#define PLUS_TMAP_BYTES 128           /* sizeof(CUtensorMap) */
#define PLUS_TMAP_RANK 5

enum { PLUS_TMAP_IN, PLUS_TMAP_OUT, PLUS_TMAP_SCRATCH };

typedef struct {
    int kernel;                       /* index into plan->kernel: the `kernel` line above the record */
    int dtype;                        /* C API element type */
    int cu_dtype;                     /* CUtensorMapDataType */
    int esize;                        /* bytes per element */
    int rank;
    int buf, index;                   /* PLUS_TMAP_IN/OUT/SCRATCH and which */
    int swizzle;                      /* bytes: 0, 32, 64 or 128 (CU_TENSOR_MAP_SWIZZLE_NONE ... 128B) */
    int line;
    plus_expr offset;                 /* elements from the buffer's start to the map's first element */
    plus_expr dim[PLUS_TMAP_RANK];    /* elements, innermost first */
    plus_expr stride[PLUS_TMAP_RANK]; /* elements between consecutive indices of dims 1 .. rank-1 ([0] unused) */
    unsigned box[PLUS_TMAP_RANK];
} plus_tmap_spec;

typedef struct plus_tmaps {
    int n;
    plus_tmap_spec t[PLUS_MAX_TMAPS];
} plus_tmaps;

/* Parse the plan's `tmap` records (plan.c keeps their lines) into plan->tmaps (freed by plus_plan_free); nothing
 * to do without them. Returns 0, or -1 with "plus_plan line N `...`: why" in err. */
int plus_tmap_parse(plus_plan* plan, char* err, size_t errlen);

/* Bind time: every map of the bound routes' kernel lines (group_route[g]: the route each of the plan's
 * n_groups binds) lies inside its tensor and satisfies the driver's stride rules. in_elems[i]: input i's
 * element count (-1: absent); out_elems, scratch_bytes: the binding's. names: input names for messages (may
 * be NULL). Returns 0 or -1 with the reason in err. */
int plus_tmap_check(const plus_plan* plan, const plus_env* env, const int* group_route, const int64_t* in_elems,
                    size_t n_in, const int64_t* out_elems, const int64_t* scratch_bytes, const char* const* names,
                    char* err, size_t errlen);

/* Launch time: encode kernel line k's maps into maps (64-byte aligned, PLUS_TMAPS_PER_KERNEL * PLUS_TMAP_BYTES
 * bytes) from the argument pointers; *n = how many (0: the line takes no map). A map with an empty dimension or
 * an absent tensor is all zero (the kernel issues no copy through it). Returns 0 or -1 with the reason in err. */
int plus_tmap_encode(const plus_plan* plan, int k, const plus_driver* d, const plus_env* env, const PlusArgs* args,
                     void* maps, int* n, char* err, size_t errlen);

#endif
