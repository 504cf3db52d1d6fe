/* Binding one run of a plan: inputs -> symbols -> values, output shapes, scratch sizes, the route and
 * each kernel line's launch geometry (checked against CUDA's launch limits); and the partial binding
 * ORT's shape inference needs at session creation. Pure C: no CUDA, no ONNX Runtime, no heap memory. */
#ifndef PLUS_PLAN_H_BIND
#define PLUS_PLAN_H_BIND

#include "plan.h"

/* One input of a run, as seen by the launcher. */
typedef struct {
    int present;           /* 0: absent optional input (pointer NULL, shape unchecked) */
    int dtype, rank;
    const int64_t* dims;
    const void* host;      /* the values in host memory, for inputs the plan reads (`shapev`); else NULL */
} plus_tensor_desc;

/* What binding computes for one run (lives on the caller's stack). */
typedef struct {
    plus_env env;
    int route;                          /* the route of group 0 (the only group without `arch` records) */
    int group_route[PLUS_MAX_GROUPS];   /* per route group: the first route whose expression holds */
    int64_t out_dims[PLUS_MAX_OUT][PLUS_MAX_RANK];
    int64_t scratch_bytes[PLUS_MAX_SCRATCH];
    int64_t out_elems[PLUS_MAX_OUT];    /* element count of each output's shape */
    int empty;                          /* every output has 0 elements: nothing to launch */
    uint32_t zeros;                     /* bit j: `shapev` line j read a 0 and bound its `zero` instead */
} plus_binding;

/* Check the inputs against the `in` lines, bind symbols (input axes, then `shapev` values), evaluate
 * `val`, `out`, `scratch` and pick the route; before that, prove the run in bounds: every `exact`
 * quotient divides, every input's and output's element count equals its `extent`. input_names may be
 * NULL. err gets "input i 'name': expected ..., got ..." etc. An absent input (present = 0) is an
 * error unless the plan marks it `optional`. */
int plus_bind(const plus_plan* plan, const plus_tensor_desc* inputs, size_t n_in, size_t n_out,
              const char* const* input_names, plus_binding* b, char* err, size_t errlen);

/* Session creation: the node's wiring against the plan. in_present[i] / out_present[o] = 0 where the
 * node wires "" (an absent tensor); refused unless the plan marks that tensor `optional`. Counts must
 * match the plan's. Returns 0 or -1 with "input 2 is wired \"\" (absent) but ..." in err. */
int plus_plan_check_wiring(const plus_plan* plan, const int* in_present, size_t n_in, const int* out_present,
                           size_t n_out, const char* const* input_names, char* err, size_t errlen);

/* The route group serving packs of `arch` ("sm_90a"): 0 for a plan without `arch` records; -1 when
 * no group lists it. */
int plus_plan_group_of(const plus_plan* plan, const char* arch);

/* 1 when the plan reads input i's values on the host (a `shapev` line names it). */
int plus_plan_input_on_host(const plus_plan* plan, int i);

/* CUDA's launch limits (all archs the launcher supports: sm_75 and later). */
#define PLUS_GRID_X_MAX 2147483647u
#define PLUS_GRID_YZ_MAX 65535u
#define PLUS_BLOCK_XY_MAX 1024u
#define PLUS_BLOCK_Z_MAX 64u
#define PLUS_BLOCK_THREADS_MAX 1024u

/* Launch geometry of one kernel line, evaluated and checked against the launch limits above.
 * Returns 0, 1 (a grid dim is 0: skip) or -1 with "kernel `entry` grid.y = N exceeds ..." in err. */
typedef struct { unsigned grid[3], block[3], smem; } plus_geom;
int plus_kernel_geom(const plus_plan* plan, const plus_kernel_spec* k, const plus_env* env,
                     plus_geom* g, char* err, size_t errlen);

/* ---- shape inference (session creation; ORT glue in ort_op.c) ----
 * What ORT knows of one input: rank and dims (-1 = unknown) and, per dim, its symbolic name
 * (NULL/"" when none). known = 0 when not even the rank is known. */
typedef struct {
    int known, rank;
    const int64_t* dims;
    const char* const* names;   /* may be NULL */
} plus_infer_input;

/* Per output: rank, dims (-1 = unknown) and a name for each unknown dim (never empty: the symbol's
 * input dim name such as "batch", else "<node>_o<k>_d<j>"). ORT stores a dim with no name as the
 * value itself, so an unknown dim must never be handed over as a bare -1. */
typedef struct {
    int dtype, rank;
    int64_t dims[PLUS_MAX_RANK];
    char names[PLUS_MAX_RANK][2 * PLUS_NAME_LEN];
} plus_infer_output;

/* Bind what the known input dims give, evaluate the `val` and `out` lines where they can be.
 * Never fails: what cannot be known stays unknown. n_in may differ from the plan's. */
void plus_infer_outputs(const plus_plan* plan, const plus_infer_input* in, size_t n_in,
                        plus_infer_output out[PLUS_MAX_OUT]);

#endif
