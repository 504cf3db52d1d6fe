/* One run of a fused node inside ONNX Runtime, the sequence both front ends share (the custom op in
 * ort_op.c, the plugin EP in ep.c): gather the inputs -> the front end's preparation (device copies,
 * shape-tensor values on the host) -> bind the plan (shapes, extents: bind.h) -> allocate and check
 * the outputs -> launch on a stream or through host staging. What differs between the front ends
 * comes in through plus_run_hooks; nothing here allocates beyond ORT's outputs and the hooks'
 * temporaries, and nothing synchronises (host staging and a NULL stream aside: kernel.h).
 *
 *     plus_run r = {.api = api, .kctx = kctx, .k = k, .drv = drv, .hooks = &hooks, .self = me};
 *     return plus_run_node(&r);   // NULL, or one status "PlusEP node '<name>': ..." */
#ifndef PLUS_ORT_RUN_H
#define PLUS_ORT_RUN_H

#include "kernel.h"
#include "ort_abi.h"

typedef struct plus_run plus_run;

typedef struct {
    /* After the inputs are gathered, before binding: set ctx/stream, move inputs to device memory,
     * point desc[i].host at shape-tensor values (NULL: nothing to do). */
    OrtStatus* (*prepare)(plus_run* r);
    /* Device memory of `bytes` for scratch or an output nobody consumes (device mode only). */
    int (*temp_alloc)(plus_run* r, size_t bytes, void** out, char* err, size_t errlen);
    void (*temp_free)(plus_run* r, void* p);
    /* An output ORT allocated, before any launch: may the kernels write it? (NULL: yes) */
    OrtStatus* (*check_output)(plus_run* r, int o, const OrtValue* v);
    /* Right before the kernels are queued on r->stream (device mode; NULL: nothing), e.g. a timing event. */
    void (*launch_begin)(plus_run* r);
    /* Called once at the end of every run that reached prepare (NULL: nothing), ok = 1 on success. */
    void (*finish)(plus_run* r, int ok);
    /* Where plan input i comes from and output o goes when the node is one part of several (the plugin
     * EP's ep_chain.c); NULL: the kernel context through in_map/out_map. get_output's *v = NULL: a
     * temporary of this run. */
    OrtStatus* (*get_input)(plus_run* r, int i, const OrtValue** v);
    OrtStatus* (*get_output)(plus_run* r, int o, int dtype, const int64_t* dims, int rank, OrtValue** v);
} plus_run_hooks;

struct plus_run {
    /* set by the front end */
    const OrtApi* api;
    OrtKernelContext* kctx;
    plus_kernel* k;
    const plus_driver* drv;
    const int* in_map;      /* plan input -> kernel-context input (-1: wired ""); NULL: the same index */
    const int* out_map;     /* plan output -> kernel-context output (-1: nobody consumes it); NULL: same */
    int staged;             /* tensors in host memory: the launcher's host staging (kernel.h) */
    const plus_run_hooks* hooks;
    void* self;             /* the front end's node object */
    CUcontext ctx;          /* device mode: set by prepare (NULL: the stream's / the current one) */
    CUstream stream;
    /* filled by plus_run_node */
    int n_in, n_out;
    plus_tensor_desc desc[PLUS_MAX_IN];
    int64_t dims[PLUS_MAX_IN][PLUS_MAX_RANK];
    void* data[PLUS_MAX_IN];
    long long elems[PLUS_MAX_IN];
    const OrtValue* value[PLUS_MAX_IN];
};

/* The whole run. Returns NULL or one status naming the node. */
OrtStatus* plus_run_node(plus_run* r);

/* A status "PlusEP node '<node>': <message>" with ORT's CreateStatus. */
OrtStatus* plus_run_status(const plus_run* r, int code, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
