/* ONNX Runtime glue: RegisterCustomOps and the `ai.plus_ep` custom ops `Fused` and `FusedHost<n>`
 * (whose first n inputs, shape tensors, are CPU-resident), each registered twice:
 *
 * - CUDA twin (GetExecutionProviderType = "CUDAExecutionProvider"): tensors are device memory;
 *   kernels go on the stream ORT hands the node; scratch comes from ORT's allocator.
 * - CPU twin (CPU EP sessions): the same kernels through host staging (cuMemAlloc, copy in, launch,
 *   synchronise, copy out, free). Slow but correct; warns once per node.
 *
 * Nothing is registered (and RegisterCustomOps still succeeds) when PLUS_EP_DISABLE=1, when the CUDA
 * driver cannot be loaded ($PLUS_EP_CUDA_LIBRARY or libcuda.so.1), cuInit fails or it reports no
 * device: ORT then inlines each Fused node's model-local function and runs the original subgraph.
 * Without a usable driver it warns once per process on stderr (the model then runs unfused); set
 * PLUS_EP_VERBOSE=1 to print why nothing was registered every time, PLUS_EP_DISABLE=1 for silence. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ep_base.h"
#include "kernel.h"
#include "ort_run.h"
#include "ort_abi.h"
#include "trust.h"

/* Session config entries (API 24, ORT >= 1.24; read only when the runtime is that new). */
typedef struct OrtKeyValuePairs OrtKeyValuePairs;
#define X(name, slot, ret, ...) typedef ret (*name##_fn)(__VA_ARGS__); enum { name##_slot = slot };
X(KernelInfo_GetConfigEntries, 391, OrtStatus*, const OrtKernelInfo*, OrtKeyValuePairs**)
X(KVPairs_GetValue, 297, const char*, const OrtKeyValuePairs*, const char*)
X(KVPairs_Release, 300, void, OrtKeyValuePairs*)
#undef X
static atomic_int g_has_config_entries;   /* the runtime's API has slot 391 */

#define EXPORT __attribute__((visibility("default")))

/* Op types (kernels/CONTRACT.md §3): `Fused` takes every input in the EP's memory; `FusedHost<n>`
 * (n = 1..PLUS_MAX_HOST_INPUTS) declares its first n inputs CPU-resident (OrtMemTypeCPUInput on the
 * CUDA twin): the shape tensors its plan reads with `shapev`, which ORT then hands over in host
 * memory, so a run needs no synchronisation. ORT keys an input's memory type by op type and input
 * index, not by node, hence one op type per count. */
#define PLUS_MAX_HOST_INPUTS PLUS_MAX_SHAPEV
#define PLUS_N_OPS (PLUS_MAX_HOST_INPUTS + 1)

typedef struct {
    OrtCustomOp op;
    int cpu;
    int n_host;       /* leading inputs declared CPU-resident (0: the op type `Fused`) */
    char name[16];    /* "Fused", "FusedHost3" */
} plus_op;

typedef struct {
    plus_kernel* k;
    const OrtApi* api;
    const plus_driver* drv;
    int cpu;
    int n_host;            /* the op type's CPU-resident leading inputs */
    int copy_shapes;       /* CUDA twin: a `shapev` input arrives in device memory (op type `Fused`) */
    OrtAllocator* alloc;   /* CUDA twin with scratch: the EP's default (device) allocator */
} ort_kernel;

/* Archs probed when the plan has no `archs` line. */
static const char* const KNOWN_ARCHS[] = {
    "sm_75", "sm_80", "sm_86", "sm_87", "sm_88", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_101",
    "sm_101a", "sm_103", "sm_103a", "sm_110", "sm_110a", "sm_120", "sm_120a", "sm_121", "sm_121a",
};

/* ---- small helpers ---- */

static OrtStatus* make_status(const OrtApi* api, int code, const char* msg) {
    return ORT_CALL(api, CreateStatus)(code, msg);
}

/* Wrap a status ORT returned with context; releases the original. */
static OrtStatus* wrap(const OrtApi* api, OrtStatus* st, const char* node, const char* what) {
    char msg[PLUS_ERR_LEN];
    snprintf(msg, sizeof msg, "PlusEP node '%s': %s: %s", node, what, ORT_CALL(api, GetErrorMessage)(st));
    ORT_CALL(api, ReleaseStatus)(st);
    return make_status(api, ORT_FAIL, msg);
}

static char* get_node_name(const OrtApi* api, const OrtKernelInfo* info) {
    size_t n = 0;
    OrtStatus* st = ORT_CALL(api, KernelInfo_GetNodeName)(info, NULL, &n);
    char* s = st ? NULL : malloc(n ? n : 1);
    if (s && (st = ORT_CALL(api, KernelInfo_GetNodeName)(info, s, &n))) free(s), s = NULL;
    if (st) ORT_CALL(api, ReleaseStatus)(st);
    return s ? s : strdup("?");
}

/* The name the node wires at input (out = 0) or output (out = 1) i; "" for an absent one ("" in
 * ONNX) and when ORT cannot say. */
static char* get_io_name(const OrtApi* api, const OrtKernelInfo* info, int out, size_t i) {
    size_t n = 0;
    KernelInfo_GetInputName_fn get = out ? ORT_CALL(api, KernelInfo_GetOutputName) : ORT_CALL(api, KernelInfo_GetInputName);
    OrtStatus* st = get(info, i, NULL, &n);
    char* s = st ? NULL : malloc(n ? n : 1);
    if (s && (st = get(info, i, s, &n))) free(s), s = NULL;
    if (st) ORT_CALL(api, ReleaseStatus)(st);
    if (s && n) s[n - 1] = 0;
    return s ? s : strdup("");
}

/* Session creation: an input or output the node wires "" is refused unless the plan marks it
 * `optional` (a kernel must never get a NULL tensor it reads or writes). */
static OrtStatus* check_wiring(const OrtApi* api, const OrtKernelInfo* info, const char* node, const plus_kernel* k,
                               char* const* in_names, size_t n_in) {
    size_t n_out = 0;
    OrtStatus* st = ORT_CALL(api, KernelInfo_GetOutputCount)(info, &n_out);
    if (st) return wrap(api, st, node, "KernelInfo_GetOutputCount");
    int in_present[PLUS_MAX_IN], out_present[PLUS_MAX_OUT];
    const plus_plan* pl = plus_kernel_plan(k);
    char err[PLUS_ERR_LEN];
    if (n_in > PLUS_MAX_IN || n_out > PLUS_MAX_OUT || n_in != (size_t)pl->n_in || n_out != (size_t)pl->n_out) {
        snprintf(err, sizeof err, "PlusEP node '%s': the node has %zu inputs and %zu outputs, its plan declares %d and %d",
                 node, n_in, n_out, pl->n_in, pl->n_out);
        return make_status(api, ORT_INVALID_ARGUMENT, err);
    }
    for (size_t i = 0; i < n_in; i++) in_present[i] = in_names[i][0] != 0;
    for (size_t o = 0; o < n_out; o++) {
        char* name = get_io_name(api, info, 1, o);
        out_present[o] = name[0] != 0;
        free(name);
    }
    if (plus_kernel_check_wiring(k, in_present, n_in, out_present, n_out, err, sizeof err))
        return make_status(api, ORT_INVALID_ARGUMENT, err);
    return NULL;
}

static OrtStatus* get_plan(const OrtApi* api, const OrtKernelInfo* info, const char* node, char** out) {
    size_t n = 0;
    *out = NULL;
    OrtStatus* st = ORT_CALL(api, KernelInfoGetAttribute_string)(info, "plus_plan", NULL, &n);
    if (st) return wrap(api, st, node, "reading the STRING attribute plus_plan (was the node rewritten with kernels?)");
    char* s = malloc(n ? n : 1);
    if (!s) return make_status(api, ORT_FAIL, "PlusEP: out of memory");
    if ((st = ORT_CALL(api, KernelInfoGetAttribute_string)(info, "plus_plan", s, &n))) {
        free(s);
        return wrap(api, st, node, "reading attribute plus_plan");
    }
    s[n ? n - 1 : 0] = 0;
    *out = s;
    return NULL;
}

/* Read the plus_images_<arch> TENSOR attribute. *value = NULL when it does not exist. */
static OrtStatus* get_pack(const OrtApi* api, const OrtKernelInfo* info, const char* node, const char* arch,
                           OrtAllocator* alloc, OrtValue** value, plus_pack_src* src) {
    char attr[64];
    snprintf(attr, sizeof attr, "plus_images_%s", arch);
    *value = NULL;
    OrtStatus* st = ORT_CALL(api, KernelInfoGetAttribute_tensor)(info, attr, alloc, value);
    if (st) {
        ORT_CALL(api, ReleaseStatus)(st);
        *value = NULL;
        return NULL;
    }
    OrtTensorTypeAndShapeInfo* ti = NULL;
    int type = 0;
    size_t count = 0;
    void* data = NULL;
    if ((st = ORT_CALL(api, GetTensorTypeAndShape)(*value, &ti))) return wrap(api, st, node, attr);
    st = ORT_CALL(api, GetTensorElementType)(ti, &type);
    if (!st) st = ORT_CALL(api, GetTensorShapeElementCount)(ti, &count);
    ORT_CALL(api, ReleaseTensorTypeAndShapeInfo)(ti);
    if (!st) st = ORT_CALL(api, GetTensorMutableData)(*value, &data);
    if (st) return wrap(api, st, node, attr);
    if (type != ORT_TENSOR_UINT8) {
        char msg[256];
        snprintf(msg, sizeof msg, "PlusEP node '%s': attribute %s must be a uint8 tensor, got element type %d", node,
                 attr, type);
        return make_status(api, ORT_FAIL, msg);
    }
    src->arch = arch;
    src->data = data;
    src->size = count;
    return NULL;
}

static void log_warning(const OrtApi* api, const OrtKernelInfo* info, const char* msg) {
    const OrtLogger* logger = NULL;
    OrtStatus* ls = ORT_CALL(api, KernelInfo_GetLogger)(info, &logger);
    if (!ls && logger) ls = ORT_CALL(api, Logger_LogMessage)(logger, ORT_LOG_WARNING, msg, __FILE__, __LINE__, __func__);
    if (ls) ORT_CALL(api, ReleaseStatus)(ls);
}

/* The op type's CPU-resident inputs against the plan: each must be a shape tensor the plan reads on
 * the host (a kernel must never get a host pointer); a `shapev` input past them (a model rewritten
 * before `FusedHost<n>` existed) is copied from device memory on every run, with one warning. */
static OrtStatus* check_host_inputs(const OrtApi* api, const OrtKernelInfo* info, const plus_op* pop,
                                    ort_kernel* ok, const plus_plan* pl, const char* node) {
    char msg[PLUS_ERR_LEN];
    for (int i = 0; i < pop->n_host; i++)
        if (!plus_plan_input_on_host(pl, i)) {
            snprintf(msg, sizeof msg, "PlusEP node '%s': op type %s takes input %d in host memory, but the plan "
                     "reads no shape tensor there (no `shapev` line names input %d)", node, pop->name, i, i);
            return make_status(api, ORT_INVALID_ARGUMENT, msg);
        }
    int first = -1;
    for (int i = pop->n_host; i < pl->n_in && first < 0; i++)
        if (plus_plan_input_on_host(pl, i)) first = i;
    if (ok->cpu || first < 0) return NULL;
    ok->copy_shapes = 1;
    snprintf(msg, sizeof msg, "PlusEP node '%s' (op type %s) reads the values of shape tensor input %d on the host, "
             "but that input arrives in device memory: every run synchronises the stream and copies it (and "
             "CUDA-graph capture is impossible). The model was rewritten before shape inputs were declared "
             "CPU-resident; re-run `plus-ep rewrite` on the original model", node, pop->name, first);
    log_warning(api, info, msg);
    return NULL;
}

/* An optional STRING attribute, malloc'ed (its length in *len when len is not NULL); NULL when absent. */
static char* optional_string(const OrtApi* api, const OrtKernelInfo* info, const char* name, size_t* len) {
    size_t n = 0;
    OrtStatus* st = ORT_CALL(api, KernelInfoGetAttribute_string)(info, name, NULL, &n);
    char* s = st || !n ? NULL : malloc(n);
    if (s && (st = ORT_CALL(api, KernelInfoGetAttribute_string)(info, name, s, &n))) free(s), s = NULL;
    if (st) ORT_CALL(api, ReleaseStatus)(st);
    if (s) s[n - 1] = 0;
    if (len) *len = s ? n - 1 : 0;
    return s;
}

/* The trust policy (trust.h) before anything of the node is loaded: the whole node as the graph holds
 * it (op type, name, wiring, the STRING attributes and packs; a known arch's pack the plan does not
 * list is refused) must be trusted. A refused node fails the session with the reason and the ways
 * out; the session's opt-out is its config entry plus_ep.trust=any. */
static OrtStatus* check_trust(const OrtApi* api, const OrtKernelInfo* info, const plus_op* pop, const char* node,
                              const plus_pack_src* packs, int n_packs, char** in_names, size_t n_in) {
    plus_trust_opts o = {.any = 0, .any_source = "session option " PLUS_TRUST_SESSION_KEY "=any", .cache_dir = NULL};
    char err[PLUS_ERR_LEN], warning[PLUS_ERR_LEN];
    if (atomic_load(&g_has_config_entries)) {
        OrtKeyValuePairs* kv = NULL;
        OrtStatus* st = ORT_CALL(api, KernelInfo_GetConfigEntries)(info, &kv);
        if (st) ORT_CALL(api, ReleaseStatus)(st);
        const char* v = kv ? ORT_CALL(api, KVPairs_GetValue)(kv, PLUS_TRUST_SESSION_KEY) : NULL;
        if (v && !strcmp(v, "any")) o.any = 1;
        else if (v && *v && strcmp(v, "verify")) {
            snprintf(err, sizeof err, "PlusEP node '%s': session option %s='%s': use 'any' or 'verify'", node,
                     PLUS_TRUST_SESSION_KEY, v);
            ORT_CALL(api, KVPairs_Release)(kv);
            return make_status(api, ORT_INVALID_ARGUMENT, err);
        }
        if (kv) ORT_CALL(api, KVPairs_Release)(kv);
    }
    plus_trust_node nd = {.domain = "ai.plus_ep", .op_type = pop->name, .name = node, .n_in = n_in,
                          .in_names = (const char* const*)in_names, .packs = packs, .n_packs = n_packs};
    char* strs[PLUS_TRUST_N_STRINGS];
    for (int i = 0; i < PLUS_TRUST_N_STRINGS; i++)
        nd.str[i] = strs[i] = optional_string(api, info, plus_trust_strings[i], &nd.str_len[i]);
    char** out_names = NULL;
    OrtStatus* st = ORT_CALL(api, KernelInfo_GetOutputCount)(info, &nd.n_out);
    if (!st && !(out_names = calloc(nd.n_out ? nd.n_out : 1, sizeof *out_names))) nd.n_out = 0;
    for (size_t i = 0; !st && i < nd.n_out; i++) out_names[i] = get_io_name(api, info, 1, i);
    nd.out_names = (const char* const*)out_names;
    OrtAllocator* a = NULL;
    OrtStatus* sa = st ? NULL : ORT_CALL(api, GetAllocatorWithDefaultOptions)(&a);
    if (sa) ORT_CALL(api, ReleaseStatus)(sa), a = NULL;
    for (size_t k = 0; a && k < sizeof KNOWN_ARCHS / sizeof *KNOWN_ARCHS && !nd.unlisted_pack; k++) {
        int have = 0;
        for (int i = 0; i < n_packs && !have; i++) have = !strcmp(packs[i].arch, KNOWN_ARCHS[k]);
        char attr[64];
        snprintf(attr, sizeof attr, "plus_images_%s", KNOWN_ARCHS[k]);
        OrtValue* v = NULL;
        if (have) continue;
        OrtStatus* s2 = ORT_CALL(api, KernelInfoGetAttribute_tensor)(info, attr, a, &v);
        if (s2) ORT_CALL(api, ReleaseStatus)(s2);
        else if (v) nd.unlisted_pack = KNOWN_ARCHS[k], ORT_CALL(api, ReleaseValue)(v);
    }
    char* sig = st ? NULL : optional_string(api, info, PLUS_TRUST_SIG_ATTR, NULL);
    int rc = st ? -1 : plus_trust_check(&nd, sig, &o, warning, sizeof warning, err, sizeof err);
    free(sig);
    for (int i = 0; i < PLUS_TRUST_N_STRINGS; i++) free(strs[i]);
    for (size_t i = 0; out_names && i < nd.n_out; i++) free(out_names[i]);
    free(out_names);
    if (st) return wrap(api, st, node, "KernelInfo_GetOutputCount");
    if (rc < 0) return make_status(api, ORT_FAIL, err);
    if (warning[0]) log_warning(api, info, warning);
    return NULL;
}

/* ---- CreateKernelV2 / KernelDestroy ---- */

static void destroy_kernel(void* p) {
    ort_kernel* ok = p;
    if (!ok) return;
    plus_kernel_destroy(ok->k);
    if (ok->alloc) ORT_CALL(ok->api, ReleaseAllocator)(ok->alloc);
    free(ok);
}

static OrtStatus* create_kernel(const OrtCustomOp* op, const OrtApi* api, const OrtKernelInfo* info, void** out) {
    const plus_op* pop = (const plus_op*)op;
    char* node = get_node_name(api, info);
    char* plan = NULL;
    char** names = NULL;
    size_t n_names = 0;
    OrtValue* values[PLUS_MAX_ARCHS] = {0};
    plus_pack_src packs[PLUS_MAX_ARCHS];
    int n_packs = 0;
    ort_kernel* ok = calloc(1, sizeof *ok);
    OrtStatus* st = NULL;
    char err[PLUS_ERR_LEN];
    *out = NULL;
    const char* why = NULL;
    if (!ok || !node) {
        st = make_status(api, ORT_FAIL, "PlusEP: out of memory");
        goto done;
    }
    ok->api = api;
    ok->cpu = pop->cpu;
    ok->n_host = pop->n_host;
    ok->drv = plus_driver_get(&why);
    if (!ok->drv) {   /* not reached: nothing is registered without a driver */
        snprintf(err, sizeof err, "PlusEP node '%s': %s", node, why);
        st = make_status(api, ORT_FAIL, err);
        goto done;
    }
    if ((st = get_plan(api, info, node, &plan))) goto done;

    OrtAllocator* host_alloc = NULL;
    if ((st = ORT_CALL(api, GetAllocatorWithDefaultOptions)(&host_alloc))) {
        st = wrap(api, st, node, "GetAllocatorWithDefaultOptions");
        goto done;
    }
    char archbuf[512];
    const char* listed[PLUS_MAX_ARCHS];
    int n_listed = plus_trust_plan_archs(plan, strlen(plan), archbuf, sizeof archbuf, listed, PLUS_MAX_ARCHS);
    if (n_listed < 0) n_listed = 0;
    const char* const* probe = n_listed ? listed : KNOWN_ARCHS;
    int n_probe = n_listed ? n_listed : (int)(sizeof KNOWN_ARCHS / sizeof *KNOWN_ARCHS);
    for (int i = 0; i < n_probe && n_packs < PLUS_MAX_ARCHS; i++) {
        if ((st = get_pack(api, info, node, probe[i], host_alloc, &values[n_packs], &packs[n_packs]))) goto done;
        if (values[n_packs]) n_packs++;
        else if (n_listed) {
            snprintf(err, sizeof err, "PlusEP node '%s': the plan's `archs` line lists %s but the node has no "
                     "attribute plus_images_%s", node, probe[i], probe[i]);
            st = make_status(api, ORT_FAIL, err);
            goto done;
        }
    }

    if ((st = ORT_CALL(api, KernelInfo_GetInputCount)(info, &n_names))) {
        st = wrap(api, st, node, "KernelInfo_GetInputCount");
        goto done;
    }
    names = calloc(n_names ? n_names : 1, sizeof(char*));
    if (!names) {
        st = make_status(api, ORT_FAIL, "PlusEP: out of memory");
        goto done;
    }
    for (size_t i = 0; i < n_names; i++) names[i] = get_io_name(api, info, 0, i);

    if ((st = check_trust(api, info, pop, node, packs, n_packs, names, n_names))) goto done;
    if (plus_kernel_create(node, plan, packs, n_packs, (const char* const*)names, n_names, &ok->k, err, sizeof err)) {
        st = make_status(api, ORT_FAIL, err);
        goto done;
    }
    const plus_plan* pl = plus_kernel_plan(ok->k);
    if ((st = check_wiring(api, info, node, ok->k, names, n_names))) goto done;
    if ((st = check_host_inputs(api, info, pop, ok, pl, node))) goto done;
    int scratch = 0;   /* scratch buffers, or temporaries for outputs the node may leave unwired */
    for (int s = 0; s < PLUS_MAX_SCRATCH; s++) scratch |= pl->has_scratch[s];
    for (int o = 0; o < pl->n_out; o++) scratch |= pl->out_optional[o];
    if (!ok->cpu && scratch && (st = ORT_CALL(api, KernelInfoGetAllocator)(info, ORT_MEM_DEFAULT, &ok->alloc))) {
        st = wrap(api, st, node, "KernelInfoGetAllocator (for scratch)");
        goto done;
    }
    if (ok->cpu) {
        snprintf(err, sizeof err, "PlusEP node '%s' runs through host staging (copies to and from the GPU "
                 "and synchronises on every run) because its session has no CUDA execution provider; add "
                 "CUDAExecutionProvider to the session's providers", node);
        log_warning(api, info, err);
    }
    *out = ok;
    ok = NULL;
done:
    for (int i = 0; i < PLUS_MAX_ARCHS; i++)
        if (values[i]) ORT_CALL(api, ReleaseValue)(values[i]);
    for (size_t i = 0; names && i < n_names; i++) free(names[i]);
    free(names);
    free(plan);
    free(node);
    destroy_kernel(ok);
    return st;
}

/* ---- KernelComputeV2: the shared run (ort_run.h) with this front end's hooks ---- */

typedef struct {
    plus_run r;              /* first: the hooks get &r */
    ort_kernel* ok;
    plus_host_values hv;     /* shape-tensor values copied from device memory (an old `Fused` node) */
} op_run;

/* Shape tensors the plan reads (`shapev`): host memory on the CPU twin and in the CPU-resident inputs
 * of a `FusedHost<n>` op; else (an old `Fused` node on the CUDA twin) copied after the stream's queued
 * work: one synchronisation per run. */
static OrtStatus* op_prepare(plus_run* r) {
    op_run* run = (op_run*)r;
    const ort_kernel* ok = run->ok;
    const plus_plan* plan = plus_kernel_plan(ok->k);
    char err[PLUS_ERR_LEN];
    for (int i = 0; i < r->n_in; i++)
        if (r->desc[i].present && plus_plan_input_on_host(plan, i) && (ok->cpu || i < ok->n_host))
            r->desc[i].host = r->data[i];
    if (ok->cpu) return NULL;
    void* stream = NULL;
    OrtStatus* st = ORT_CALL(r->api, KernelContext_GetGPUComputeStream)(r->kctx, &stream);
    if (st) return wrap(r->api, st, plus_kernel_node(ok->k), "KernelContext_GetGPUComputeStream");
    r->stream = (CUstream)stream;
    if (ok->copy_shapes && plus_kernel_read_shape_inputs(ok->k, ok->drv, NULL, r->stream, r->desc,
                                                         (const void* const*)r->data, (size_t)r->n_in, &run->hv, err,
                                                         sizeof err))
        return make_status(r->api, ORT_FAIL, err);
    return NULL;
}

/* Scratch and outputs nobody consumes: ORT's scratch buffers on the EP's allocator (ORT orders their
 * reuse after the work queued on this stream). */
static int op_temp_alloc(plus_run* r, size_t bytes, void** out, char* err, size_t errlen) {
    const ort_kernel* ok = ((op_run*)r)->ok;
    if (!ok->alloc) return snprintf(err, errlen, "PlusEP node '%s': no device allocator for scratch", plus_kernel_node(ok->k)), -1;
    OrtStatus* st = ORT_CALL(r->api, KernelContext_GetScratchBuffer)(r->kctx, ok->alloc->Info(ok->alloc), bytes, out);
    if (!st) return 0;
    snprintf(err, errlen, "PlusEP node '%s': allocating scratch (KernelContext_GetScratchBuffer): %s",
             plus_kernel_node(ok->k), ORT_CALL(r->api, GetErrorMessage)(st));
    ORT_CALL(r->api, ReleaseStatus)(st);
    *out = NULL;
    return -1;
}

static void op_temp_free(plus_run* r, void* p) {
    const ort_kernel* ok = ((op_run*)r)->ok;
    OrtStatus* st = ORT_CALL(r->api, AllocatorFree)(ok->alloc, p);
    if (st) ORT_CALL(r->api, ReleaseStatus)(st);
}

static const plus_run_hooks OP_HOOKS = {.prepare = op_prepare, .temp_alloc = op_temp_alloc, .temp_free = op_temp_free};

static OrtStatus* compute(void* p, OrtKernelContext* ctx) {
    ort_kernel* ok = p;
    op_run run;
    run.r = (plus_run){.api = ok->api, .kctx = ctx, .k = ok->k, .drv = ok->drv, .staged = ok->cpu, .hooks = &OP_HOOKS};
    run.ok = ok;
    return plus_run_node(&run.r);
}

/* ---- output types and shapes for ORT's shape inference ----
 * The op's outputs are declared "any type", so ORT cannot infer the element type of an intermediate
 * Fused output by itself: InferOutputShapeFn sets each output's type, rank and dims from the plan's
 * `out` lines. Symbols are bound from the inputs' known dims (and `val` lines evaluated where they
 * can be); an output dim that is one symbol bound to a named input dim takes that name ("batch");
 * any other unknown dim gets a name of its own ("<node>_o<k>_d<j>"). ORT stores a dim with no name
 * as the value itself, so an unknown dim must never be handed over as a bare -1: shape-data
 * propagation would carry -1 into Shape/Gather/Concat chains downstream (seen on ORT 1.31:
 * "Reshape: Invalid position of 0"). A plan that does not parse is left alone here: CreateKernelV2
 * reports it with the node's name. */

static _Atomic(const OrtApi*) g_api;   /* the one table ORT hands RegisterCustomOps */

static void drop(const OrtApi* api, OrtStatus* st) {
    if (st) ORT_CALL(api, ReleaseStatus)(st);
}

/* What ORT knows of each input (rank, dims, dim names); plus_infer_outputs (bind.c) does the rest. */
static OrtStatus* infer_shapes(const OrtCustomOp* op, OrtShapeInferContext* ctx) {
    (void)op;
    const OrtApi* api = atomic_load(&g_api);
    const OrtOpAttr* attr = NULL;
    OrtStatus* st = ORT_CALL(api, ShapeInferContext_GetAttribute)(ctx, "plus_plan", &attr);
    if (st || !attr) return drop(api, st), NULL;
    size_t n = 0;
    drop(api, ORT_CALL(api, ReadOpAttr)(attr, ORT_OP_ATTR_STRING, NULL, 0, &n));   /* size query */
    char* text = n ? malloc(n + 1) : NULL;
    if (!text) return NULL;
    st = ORT_CALL(api, ReadOpAttr)(attr, ORT_OP_ATTR_STRING, text, n, &n);
    text[st ? 0 : n] = 0;
    drop(api, st);
    plus_plan plan;
    char err[PLUS_ERR_LEN];
    int ok = !plus_plan_parse(text, &plan, err, sizeof err);
    free(text);
    if (!ok) return NULL;
    size_t n_in = 0;
    st = ORT_CALL(api, ShapeInferContext_GetInputCount)(ctx, &n_in);
    if (st) n_in = 0, drop(api, st);
    if (n_in > (size_t)plan.n_in) n_in = (size_t)plan.n_in;
    int64_t dims[PLUS_MAX_IN][PLUS_MAX_RANK];
    const char* names[PLUS_MAX_IN][PLUS_MAX_RANK];
    plus_infer_input in[PLUS_MAX_IN];
    for (size_t i = 0; i < n_in; i++) {
        OrtTensorTypeAndShapeInfo* info = NULL;   /* owned by the context */
        size_t rank = 0;
        in[i] = (plus_infer_input){.known = 0, .dims = dims[i], .names = names[i]};
        st = ORT_CALL(api, ShapeInferContext_GetInputTypeShape)(ctx, i, &info);
        if (!st && info) st = ORT_CALL(api, GetDimensionsCount)(info, &rank);
        if (st || !info || rank > PLUS_MAX_RANK) {
            drop(api, st);
            continue;
        }
        memset(names[i], 0, sizeof names[i]);
        st = ORT_CALL(api, GetDimensions)(info, dims[i], rank);
        if (!st) st = ORT_CALL(api, GetSymbolicDimensions)(info, names[i], rank);
        if (st) {
            drop(api, st);
            continue;
        }
        in[i].known = 1;
        in[i].rank = (int)rank;
    }
    plus_infer_output out[PLUS_MAX_OUT];
    plus_infer_outputs(&plan, in, n_in, out);
    st = NULL;
    for (int o = 0; o < plan.n_out && !st; o++) {
        const char* dn[PLUS_MAX_RANK];
        for (int d = 0; d < out[o].rank; d++) dn[d] = out[o].dims[d] < 0 ? out[o].names[d] : "";
        OrtTensorTypeAndShapeInfo* ti = NULL;
        st = ORT_CALL(api, CreateTensorTypeAndShapeInfo)(&ti);
        if (!st) st = ORT_CALL(api, SetTensorElementType)(ti, out[o].dtype);
        if (!st) st = ORT_CALL(api, SetDimensions)(ti, out[o].dims, (size_t)out[o].rank);
        if (!st) st = ORT_CALL(api, SetSymbolicDimensions)(ti, dn, (size_t)out[o].rank);
        if (!st) st = ORT_CALL(api, ShapeInferContext_SetOutputTypeShape)(ctx, (size_t)o, ti);
        if (ti) ORT_CALL(api, ReleaseTensorTypeAndShapeInfo)(ti);
    }
    plus_plan_free(&plan);
    return st;
}

/* ---- the OrtCustomOp objects ---- */

static const char* op_name(const OrtCustomOp* op) { return ((const plus_op*)op)->name; }
static const char* op_ep(const OrtCustomOp* op) {   /* NULL = the CPU execution provider */
    return ((const plus_op*)op)->cpu ? NULL : "CUDAExecutionProvider";
}
static int op_type(const OrtCustomOp* op, size_t i) { (void)op, (void)i; return 0; /* any */ }
static size_t op_in_count(const OrtCustomOp* op) { return (size_t)((const plus_op*)op)->n_host + 1; }
static size_t op_out_count(const OrtCustomOp* op) { (void)op; return 1; }
/* FusedHost<n>: n required inputs, then the variadic rest (only the last formal input may be variadic). */
static int op_in_char(const OrtCustomOp* op, size_t i) {
    return i < (size_t)((const plus_op*)op)->n_host ? ORT_CHAR_REQUIRED : ORT_CHAR_VARIADIC;
}
static int op_out_char(const OrtCustomOp* op, size_t i) { (void)op, (void)i; return ORT_CHAR_VARIADIC; }
/* ORT asks per formal input and applies the answer to that node input index (the variadic formal's
 * first node input and the ones after it stay in the EP's memory). The CPU twin's inputs are host
 * memory anyway. */
static int op_memtype(const OrtCustomOp* op, size_t i) {
    const plus_op* p = (const plus_op*)op;
    return !p->cpu && i < (size_t)p->n_host ? ORT_MEM_CPU_INPUT : ORT_MEM_DEFAULT;
}
static int op_min_arity(const OrtCustomOp* op) { (void)op; return 1; }
static int op_heterogeneous(const OrtCustomOp* op) { (void)op; return 0; }

/* Static: ORT requires the ops (and domains) to outlive every session using them. [0] is `Fused`. */
static plus_op g_cuda_ops[PLUS_N_OPS], g_cpu_ops[PLUS_N_OPS];
static pthread_once_t g_ops_once = PTHREAD_ONCE_INIT;

static void init_op(plus_op* p, int cpu, int n_host) {
    p->op = (OrtCustomOp){.version = PLUS_ORT_API_VERSION, .GetName = op_name, .GetExecutionProviderType = op_ep,
                          .GetInputType = op_type, .GetInputTypeCount = op_in_count, .GetOutputType = op_type,
                          .GetOutputTypeCount = op_out_count, .KernelDestroy = destroy_kernel,
                          .GetInputCharacteristic = op_in_char, .GetOutputCharacteristic = op_out_char,
                          .GetInputMemoryType = op_memtype, .GetVariadicInputMinArity = op_min_arity,
                          .GetVariadicInputHomogeneity = op_heterogeneous, .GetVariadicOutputMinArity = op_min_arity,
                          .GetVariadicOutputHomogeneity = op_heterogeneous, .CreateKernelV2 = create_kernel,
                          .KernelComputeV2 = compute, .InferOutputShapeFn = infer_shapes};
    p->cpu = cpu;
    p->n_host = n_host;
    if (n_host) snprintf(p->name, sizeof p->name, "FusedHost%d", n_host);
    else snprintf(p->name, sizeof p->name, "Fused");
}

static void init_ops(void) {
    for (int n = 0; n < PLUS_N_OPS; n++) init_op(&g_cuda_ops[n], 0, n), init_op(&g_cpu_ops[n], 1, n);
}

EXPORT OrtStatus* RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
    int verbose = getenv("PLUS_EP_VERBOSE") && strcmp(getenv("PLUS_EP_VERBOSE"), "0");
    const OrtApi* api = api_base ? api_base->GetApi(PLUS_ORT_API_VERSION) : NULL;
    if (!api) {
        fprintf(stderr, "PlusEP: ONNX Runtime lacks C API version %d (ORT >= 1.18 needed); Fused nodes will run "
                "their function bodies\n", PLUS_ORT_API_VERSION);
        return NULL;
    }
    const char* dis = getenv("PLUS_EP_DISABLE");
    if (dis && *dis && strcmp(dis, "0")) {
        if (verbose) fprintf(stderr, "PlusEP: PLUS_EP_DISABLE is set; registering nothing (function bodies run)\n");
        return NULL;
    }
    const char* why = NULL;
    if (!plus_driver_get(&why)) {
        /* Once per process, through ORT's default logger when the library is also registered as an execution
         * provider (`import plus_ep`: its severity decides; a session's own severity does not reach
         * RegisterCustomOps), else on stderr: the model still runs, but unfused, and a server would not know why. */
        static atomic_int warned;
        atomic_int every_time = 0;     /* PLUS_EP_VERBOSE: each registration says it */
        plus_ep_log_once(NULL, ORT_LOG_WARNING, verbose ? &every_time : &warned, "PlusEP: WARNING: %s; "
                         "ai.plus_ep::Fused nodes run their original subgraphs, without PlusEP's kernels (set "
                         "PLUS_EP_DISABLE=1 to run them unfused on purpose, without this warning)", why);
        return NULL;
    }
    atomic_store(&g_api, api);
    int major = 0, minor = 0;   /* session config entries for the trust opt-out: ORT >= 1.24 */
    const char* version = api_base->GetVersionString ? api_base->GetVersionString() : NULL;
    if (version && sscanf(version, "%d.%d", &major, &minor) == 2)
        atomic_store(&g_has_config_entries, major > 1 || (major == 1 && minor >= 24));
    OrtCustomOpDomain* dom = NULL;   /* never released: it must outlive the sessions */
    OrtStatus* st = ORT_CALL(api, CreateCustomOpDomain)("ai.plus_ep", &dom);
    pthread_once(&g_ops_once, init_ops);
    for (int n = 0; n < PLUS_N_OPS && !st; n++) {
        st = ORT_CALL(api, CustomOpDomain_Add)(dom, &g_cuda_ops[n].op);
        if (!st) st = ORT_CALL(api, CustomOpDomain_Add)(dom, &g_cpu_ops[n].op);
    }
    if (!st) st = ORT_CALL(api, AddCustomOpDomain)(options, dom);
    return st;
}
