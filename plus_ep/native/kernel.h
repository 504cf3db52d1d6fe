/* One fused node's kernel object: its parsed plan, its image packs and, per CUDA context, the loaded
 * modules and functions. Independent of ONNX Runtime (ort_op.c adapts it), so tests drive it directly. */
#ifndef PLUS_KERNEL_H
#define PLUS_KERNEL_H

#include "driver.h"
#include "bind.h"
#include "pack.h"

typedef struct plus_kernel plus_kernel;

typedef struct {
    const char* arch;         /* "sm_90a" (the attribute is plus_images_<arch>) */
    const uint8_t* data;      /* copied by plus_kernel_create */
    size_t size;
} plus_pack_src;

/* Parse the plan and packs. node: name for messages (NULL or "" = the plan's `node` line).
 * input_names (may be NULL) are copied. Returns 0 or -1 with err = "node 'X': ...". */
int plus_kernel_create(const char* node, const char* plan_text, const plus_pack_src* packs, int n_packs,
                       const char* const* input_names, size_t n_names, plus_kernel** out, char* err,
                       size_t errlen);
void plus_kernel_destroy(plus_kernel* k);
const plus_plan* plus_kernel_plan(const plus_kernel* k);
const char* plus_kernel_node(const plus_kernel* k);

/* plus_bind with the node's input names; err prefixed with the node. */
int plus_kernel_bind(const plus_kernel* k, const plus_tensor_desc* in, size_t n_in, size_t n_out,
                     plus_binding* b, char* err, size_t errlen);

/* plus_plan_check_wiring (bind.h) at session creation; err prefixed with the node. */
int plus_kernel_check_wiring(const plus_kernel* k, const int* in_present, size_t n_in, const int* out_present,
                             size_t n_out, char* err, size_t errlen);

/* Launch the bound route on `stream` (nothing at all when every output is empty: b->empty). args: in/out/scratch pointers set by the caller; v[] is filled
 * here. ctx: the context of the stream (NULL = the stream's, else the current one). Loads modules for
 * that context on first use. No heap memory, no synchronisation (unless stream is NULL: then the
 * context is synchronised before and after, because the caller's work order is unknown). */
int plus_kernel_launch(plus_kernel* k, const plus_driver* d, CUcontext ctx, CUstream stream,
                       const plus_binding* b, PlusArgs* args, char* err, size_t errlen);

/* Host staging (the CPU-EP twin): copy present inputs to device memory, allocate outputs and scratch,
 * launch on the primary context of device 0, synchronise, copy outputs back, free (nothing when
 * every output is empty). */
typedef struct { const void* host; size_t bytes; } plus_host_in;
typedef struct { void* host; size_t bytes; } plus_host_out;
int plus_kernel_run_staged(plus_kernel* k, const plus_driver* d, const plus_host_in* in, size_t n_in,
                           const plus_host_out* out, size_t n_out, const plus_binding* b, char* err,
                           size_t errlen);

/* Shape tensors the plan reads on the host (`shapev`) while the run's inputs are device memory (the
 * CUDA twin, the plugin EP's device mode): wait for `stream` (the producer's work is queued there; NULL:
 * synchronise ctx), copy the elements the plan reads into vals[] and point in[i].host at them. ctx:
 * as for plus_kernel_launch (NULL = the stream's, else the current one). dev[i] are the inputs'
 * device pointers. Inputs whose in[i].host is already set (CPU-resident, e.g. the leading inputs of a
 * `FusedHost<n>` op) are left alone; nothing to do (returns 0 at once, no synchronisation) when no
 * input needs a copy. */
typedef struct { int64_t v[PLUS_MAX_SHAPEV][PLUS_SHAPEV_ELEMS]; } plus_host_values;
int plus_kernel_read_shape_inputs(plus_kernel* k, const plus_driver* d, CUcontext ctx, CUstream stream,
                                  plus_tensor_desc* in,
                                  const void* const* dev, size_t n_in, plus_host_values* vals, char* err,
                                  size_t errlen);

#endif
