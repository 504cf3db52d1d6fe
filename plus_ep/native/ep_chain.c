/* A compiled node of the PlusEP plugin EP: the parts that compute it, in order (ep.h). A Fused node of a
 * rewritten model is one kernel part; a planned group of a model with contrib ops (plus_ep/ep.py) may be
 * several: the kernels of one contrib node's expansion (an Attention's Q/K/V projections and its
 * attention), with the constants that expansion made and, as host parts, the shape computations of it
 * that no kernel holds (ONNX Runtime runs those on the CPU in a small session of its own, as it would
 * in the rewritten model).
 *
 * Tensors are slots: the fused node's inputs (read from the kernel context), its constants, and what
 * each part writes (ORT's output when the fused node has that output, else an intermediate this run
 * allocates: host memory when staging, device memory on the node's stream on a GPU, released at the end
 * of the run). The EPContext node of a compiled node (ep_context.c) carries its parts and constants. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ep.h"
#include "ort_tensor.h"

#define X(name, slot, ret, ...) typedef ret (*name##_fn)(__VA_ARGS__); enum { name##_slot = slot };
X(CreateEnv, 3, OrtStatus*, int, const char*, OrtEnv**)
X(CreateSessionFromArray, 8, OrtStatus*, const OrtEnv*, const void*, size_t, const OrtSessionOptions*, OrtSession**)
X(Run, 9, OrtStatus*, OrtSession*, const OrtRunOptions*, const char* const*, const OrtValue* const*, size_t,
  const char* const*, size_t, OrtValue**)
X(CreateSessionOptions, 10, OrtStatus*, OrtSessionOptions**)
X(SetSessionLogSeverityLevel, 22, OrtStatus*, OrtSessionOptions*, int)
X(SetIntraOpNumThreads, 24, OrtStatus*, OrtSessionOptions*, int)
X(CreateTensorWithDataAsOrtValue, 49, OrtStatus*, const OrtMemoryInfo*, void*, size_t, const int64_t*, size_t, int,
  OrtValue**)
X(CreateCpuMemoryInfo, 69, OrtStatus*, int, int, OrtMemoryInfo**)
X(ReleaseEnv, 92, void, OrtEnv*)
X(ReleaseSession, 95, void, OrtSession*)
X(ReleaseSessionOptions, 100, void, OrtSessionOptions*)
#undef X

typedef struct {
    char* name;
    int ctx_in, ctx_out;   /* the fused node's input / output index, -1 */
    int konst;             /* the constant's index, -1 */
    int read;              /* a later part reads it */
} chain_slot;

typedef struct {
    plus_ep_const c;                 /* owned copy */
    OrtValue* host;                  /* wraps c.data */
    CUdeviceptr dev;                 /* gpu: uploaded on the first run */
    OrtValue* dev_value;
} chain_const;

typedef struct {
    int kind;
    plus_ep_node* k;                 /* kernel */
    OrtSession* sess;                /* host */
    char node[PLUS_NAME_LEN];
    size_t n_in, n_out;
    char** in_names;                 /* the part's names as given (host: the model's input/output names) */
    char** out_names;
    int* in_slot;
    int* out_slot;
    /* kept for the EPContext node (ep.context_enable=1): */
    char* plan;
    int n_packs;
    plus_pack_src packs[PLUS_MAX_ARCHS];
    char* signature;
    plus_ctx_fused fused;
    uint8_t* model;
    size_t model_size;
} chain_part;

typedef struct {
    OrtNodeComputeInfo base;         /* first */
    plus_ep* ep;
    char node[PLUS_NAME_LEN];
    size_t n_parts;
    chain_part* parts;
    size_t n_slots;
    chain_slot* slots;
    size_t n_consts;
    chain_const* consts;
    int has_host;
    pthread_mutex_t upload;          /* gpu: the constants' first upload */
} plus_ep_chain;

struct plus_ep_run {
    plus_ep_chain* ch;
    OrtKernelContext* kctx;
    const OrtValue** val;            /* per slot */
    OrtValue** owned;                /* per slot: a value this run made */
    void** host_mem;                 /* per slot: its host buffer (staging) */
    CUdeviceptr* dev_mem;            /* per slot: its device buffer (gpu) */
    CUcontext ctx;
    void* stream;
    int foreign;
};

static OrtEnv* g_env;                /* ORT's environment (one per process), for the host parts' sessions */
static pthread_mutex_t g_env_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_env_users;

static OrtStatus* env_acquire(OrtEnv** out) {
    OrtStatus* st = NULL;
    pthread_mutex_lock(&g_env_lock);
    if (!g_env) st = ORT_CALL(plus_ep_api, CreateEnv)(ORT_LOG_ERROR, "PlusEP", &g_env);   /* the existing one */
    if (!st) g_env_users++, *out = g_env;
    pthread_mutex_unlock(&g_env_lock);
    return st;
}

static void env_release(void) {
    pthread_mutex_lock(&g_env_lock);
    if (g_env && !--g_env_users) ORT_CALL(plus_ep_api, ReleaseEnv)(g_env), g_env = NULL;
    pthread_mutex_unlock(&g_env_lock);
}

static OrtMemoryInfo* g_cpu_info;
static pthread_once_t g_cpu_once = PTHREAD_ONCE_INIT;
static void make_cpu_info(void) {
    plus_ep_drop(ORT_CALL(plus_ep_api, CreateCpuMemoryInfo)(0 /* OrtDeviceAllocator */, 0, &g_cpu_info));
}
static const OrtMemoryInfo* cpu_info(void) {
    pthread_once(&g_cpu_once, make_cpu_info);
    return g_cpu_info;
}

static OrtStatus* oom(void) { return plus_ep_status(ORT_FAIL, "PlusEP: out of memory"); }

static int slot_named(plus_ep_chain* ch, const char* name) {
    for (size_t s = 0; s < ch->n_slots; s++)
        if (!strcmp(ch->slots[s].name, name)) return (int)s;
    return -1;
}

static int add_slot(plus_ep_chain* ch, const char* name, size_t* cap) {
    if (ch->n_slots == *cap) {
        size_t c = *cap ? 2 * *cap : 32;
        chain_slot* g = realloc(ch->slots, c * sizeof *g);
        if (!g) return -1;
        ch->slots = g;
        *cap = c;
    }
    chain_slot* sl = &ch->slots[ch->n_slots];
    if (!(sl->name = strdup(name))) return -1;
    sl->ctx_in = sl->ctx_out = sl->konst = -1;
    sl->read = 0;
    return (int)ch->n_slots++;
}

static char** copy_names(const char* const* v, size_t n) {
    char** out = calloc(n + 1, sizeof *out);
    for (size_t i = 0; out && i < n; i++)
        if (!(out[i] = strdup(v[i] ? v[i] : ""))) {
            for (size_t j = 0; j < i; j++) free(out[j]);
            free(out);
            return NULL;
        }
    return out;
}

static void free_names(char** v, size_t n) {
    for (size_t i = 0; v && i < n; i++) free(v[i]);
    free(v);
}

void plus_ep_chain_destroy(OrtNodeComputeInfo* info) {
    plus_ep_chain* ch = (plus_ep_chain*)info;
    if (!ch) return;
    plus_ep* ep = ch->ep;
    for (size_t i = 0; i < ch->n_parts; i++) {
        chain_part* p = &ch->parts[i];
        plus_ep_kernel_destroy(p->k);
        if (p->sess) ORT_CALL(plus_ep_api, ReleaseSession)(p->sess);
        free_names(p->in_names, p->n_in);
        free_names(p->out_names, p->n_out);
        free(p->in_slot);
        free(p->out_slot);
        free(p->plan);
        for (int k = 0; k < p->n_packs; k++) free((void*)p->packs[k].arch), free((void*)p->packs[k].data);
        free(p->signature);
        plus_ctx_fused_free(&p->fused);
        free(p->model);
    }
    if (ch->has_host) env_release();
    for (size_t c = 0; c < ch->n_consts; c++) {
        chain_const* k = &ch->consts[c];
        if (k->host) ORT_CALL(plus_ep_api, ReleaseValue)(k->host);
        if (k->dev_value) ORT_CALL(plus_ep_api, ReleaseValue)(k->dev_value);
        if (k->dev && ep && ep->drv) {
            char err[PLUS_ERR_LEN];
            CUcontext ctx = plus_ep_primary_ctx(ep->drv, ep->ordinal, err, sizeof err);
            if (ctx && !ep->drv->cuCtxPushCurrent(ctx)) {
                ep->drv->cuMemFree(k->dev);
                ep->drv->cuCtxPopCurrent(&ctx);
            }
        }
        free(k->c.name);
        free(k->c.data);
    }
    for (size_t s = 0; s < ch->n_slots; s++) free(ch->slots[s].name);
    free(ch->parts);
    free(ch->slots);
    free(ch->consts);
    pthread_mutex_destroy(&ch->upload);
    free(ch);
}

static OrtStatus* create_state(OrtNodeComputeInfo* self, OrtNodeComputeContext* ctx, void** state) {
    (void)ctx;
    *state = self;
    return NULL;
}
static void release_state(OrtNodeComputeInfo* self, void* state) { (void)self, (void)state; }
static OrtStatus* chain_compute(OrtNodeComputeInfo* self, void* state, OrtKernelContext* kctx);

/* A host part's session: the part's model on ONNX Runtime's CPU provider, one thread (it holds a few
 * shape computations). */
static OrtStatus* host_session(const chain_part* p, OrtSession** out) {
    OrtEnv* env = NULL;
    OrtSessionOptions* so = NULL;
    OrtStatus* st = env_acquire(&env);
    if (st) return st;
    if (!(st = ORT_CALL(plus_ep_api, CreateSessionOptions)(&so)) &&
        !(st = ORT_CALL(plus_ep_api, SetIntraOpNumThreads)(so, 1)) &&
        !(st = ORT_CALL(plus_ep_api, SetSessionLogSeverityLevel)(so, ORT_LOG_ERROR)))
        st = ORT_CALL(plus_ep_api, CreateSessionFromArray)(env, p->model, p->model_size, so, out);
    if (so) ORT_CALL(plus_ep_api, ReleaseSessionOptions)(so);
    if (st) {
        OrtStatus* w = plus_ep_status(ORT_FAIL, "PlusEP host part '%s': ONNX Runtime refused its model: %s", p->node,
                                      ORT_CALL(plus_ep_api, GetErrorMessage)(st));
        plus_ep_drop(st);
        env_release();
        return w;
    }
    return NULL;
}

OrtStatus* plus_ep_chain_create(plus_ep* ep, const char* name, const plus_ctx_part* parts, size_t n_parts,
                                const plus_ctx_const* consts, size_t n_consts, const char* const* fin,
                                size_t n_fin, const char* const* fout, size_t n_fout, OrtNodeComputeInfo** out) {
    *out = NULL;
    if (!n_parts || n_parts > PLUS_CTX_MAX_PARTS)
        return plus_ep_status(ORT_FAIL, "PlusEP node '%s': %zu parts (1 to %d)", name, n_parts, PLUS_CTX_MAX_PARTS);
    plus_ep_chain* ch = calloc(1, sizeof *ch);
    if (!ch) return oom();
    pthread_mutex_init(&ch->upload, NULL);
    ch->ep = ep;
    snprintf(ch->node, sizeof ch->node, "%s", name);
    OrtStatus* st = NULL;
    size_t cap = 0;
    if (!(ch->parts = calloc(n_parts, sizeof *ch->parts)) || (n_consts && !(ch->consts = calloc(n_consts, sizeof *ch->consts)))) {
        plus_ep_chain_destroy(&ch->base);
        return oom();
    }
    /* constants: an owned copy each, wrapped for host memory */
    for (size_t c = 0; c < n_consts && !st; c++) {
        chain_const* k = &ch->consts[c];
        const plus_ctx_const* src = &consts[c];
        if (src->rank < 0 || src->rank > PLUS_MAX_RANK || slot_named(ch, src->name) >= 0) {
            st = plus_ep_status(ORT_FAIL, "PlusEP node '%s': constant '%s' is repeated or of rank %d", name, src->name,
                                src->rank);
            break;
        }
        ch->n_consts++;
        k->c.dtype = src->dtype;
        k->c.rank = src->rank;
        memcpy(k->c.dims, src->dims, (size_t)src->rank * sizeof *src->dims);
        k->c.bytes = src->bytes;
        if (!(k->c.name = strdup(src->name)) || !(k->c.data = malloc(src->bytes ? src->bytes : 1))) {
            st = oom();
            break;
        }
        if (src->bytes) memcpy(k->c.data, src->data, src->bytes);
        st = ORT_CALL(plus_ep_api, CreateTensorWithDataAsOrtValue)(cpu_info(), k->c.data, k->c.bytes, k->c.dims,
                                                                    (size_t)k->c.rank, k->c.dtype, &k->host);
        int sl = st ? -1 : add_slot(ch, src->name, &cap);
        if (!st && sl < 0) st = oom();
        if (!st) ch->slots[sl].konst = (int)c;
    }
    /* parts in order: each input a constant, an earlier part's output or the fused node's input */
    for (size_t i = 0; i < n_parts && !st; i++) {
        const plus_ctx_part* src = &parts[i];
        chain_part* p = &ch->parts[i];
        ch->n_parts = i + 1;
        p->kind = src->kind;
        snprintf(p->node, sizeof p->node, "%s", src->node);
        p->n_in = src->n_inputs;
        p->n_out = src->n_outputs;
        if (!(p->in_names = copy_names(src->inputs, src->n_inputs)) ||
            !(p->out_names = copy_names(src->outputs, src->n_outputs)) ||
            !(p->in_slot = calloc(p->n_in + 1, sizeof *p->in_slot)) || !(p->out_slot = calloc(p->n_out + 1, sizeof *p->out_slot))) {
            st = oom();
            break;
        }
        if (p->kind == PLUS_PART_HOST)   /* the model's own input name: the first of "a\tb" */
            for (size_t j = 0; j < p->n_in; j++) p->in_names[j][strcspn(p->in_names[j], "\t")] = 0;
        for (size_t j = 0; j < p->n_in && !st; j++) {
            const char* nm = src->inputs[j];
            int sl = -1;
            if (nm[0] && (sl = slot_named(ch, nm)) < 0) {
                for (size_t k = 0; k < n_fin && sl < 0; k++)
                    if (plus_ep_name_is(nm, fin[k])) {
                        for (size_t t = 0; t < ch->n_slots && sl < 0; t++)
                            if (ch->slots[t].ctx_in == (int)k) sl = (int)t;
                        if (sl < 0 && (sl = add_slot(ch, fin[k], &cap)) >= 0) ch->slots[sl].ctx_in = (int)k;
                        if (sl < 0) st = oom();
                    }
                if (sl < 0 && !st)
                    st = plus_ep_status(ORT_FAIL, "PlusEP node '%s': input '%s' of part '%s' is not an input of the "
                                        "node ONNX Runtime fused, a constant of it or an earlier part's output",
                                        name, nm, src->node);
            }
            if (sl >= 0) ch->slots[sl].read = 1;
            p->in_slot[j] = sl;
            if (!st && p->kind == PLUS_PART_HOST && sl < 0)
                st = plus_ep_status(ORT_FAIL, "PlusEP node '%s': host part '%s' has an absent input", name, src->node);
        }
        for (size_t j = 0; j < p->n_out && !st; j++) {
            const char* nm = src->outputs[j];
            p->out_slot[j] = -1;
            if (!nm[0]) continue;
            if (slot_named(ch, nm) >= 0) {
                st = plus_ep_status(ORT_FAIL, "PlusEP node '%s': tensor '%s' is written twice", name, nm);
                break;
            }
            int sl = add_slot(ch, nm, &cap);
            if (sl < 0) {
                st = oom();
                break;
            }
            for (size_t k = 0; k < n_fout; k++)
                if (!strcmp(fout[k], nm)) ch->slots[sl].ctx_out = (int)k;
            p->out_slot[j] = sl;
        }
        if (st) break;
        if (p->kind == PLUS_PART_KERNEL) {
            st = plus_ep_kernel_create(ep, src->node, src->plan, src->packs, src->n_packs, src->inputs, src->n_inputs,
                                       src->outputs, src->n_outputs, &p->k);
        } else if (p->kind == PLUS_PART_HOST) {
            if (!src->model || !src->model_size || !(p->model = malloc(src->model_size))) st = oom();
            else {
                memcpy(p->model, src->model, src->model_size);
                p->model_size = src->model_size;
                st = host_session(p, &p->sess);
                if (!st) ch->has_host = 1;
            }
        } else {
            st = plus_ep_status(ORT_FAIL, "PlusEP node '%s': part '%s' of unknown kind %d", name, src->node, src->kind);
        }
        if (!st && p->kind == PLUS_PART_KERNEL && ep->ctx.enable) {   /* what the EPContext node will carry */
            p->plan = strdup(src->plan);
            p->signature = src->signature ? strdup(src->signature) : NULL;
            if (!p->plan || (src->signature && !p->signature) || plus_ctx_fused_set(&p->fused, src)) st = oom();
            for (int k = 0; k < src->n_packs && !st; k++) {
                char* a = strdup(src->packs[k].arch);
                uint8_t* d = malloc(src->packs[k].size ? src->packs[k].size : 1);
                if (!a || !d) {
                    free(a), free(d), st = oom();
                    break;
                }
                memcpy(d, src->packs[k].data, src->packs[k].size);
                p->packs[p->n_packs++] = (plus_pack_src){.arch = a, .data = d, .size = src->packs[k].size};
            }
        }
    }
    /* an output nobody reads and the fused node does not have: a temporary of its kernel run; every output
     * of the fused node written by one part */
    for (size_t i = 0; i < ch->n_parts && !st; i++)
        for (size_t j = 0; j < ch->parts[i].n_out; j++) {
            int sl = ch->parts[i].out_slot[j];
            if (sl >= 0 && ch->slots[sl].ctx_out < 0 && !ch->slots[sl].read && ch->parts[i].kind == PLUS_PART_KERNEL)
                ch->parts[i].out_slot[j] = -1;
        }
    for (size_t k = 0; k < n_fout && !st; k++) {
        int made = 0;
        for (size_t t = 0; t < ch->n_slots; t++) made |= ch->slots[t].ctx_out == (int)k;
        if (!made)
            st = plus_ep_status(ORT_FAIL, "PlusEP node '%s': output '%s' of the node ONNX Runtime fused is computed by "
                                "none of its parts", name, fout[k]);
    }
    for (size_t i = 0; i < ch->n_parts && !st; i++)
        if (ch->parts[i].k) plus_ep_kernel_set_slots(ch->parts[i].k, ch->parts[i].in_slot, ch->parts[i].out_slot);
    if (st) {
        plus_ep_chain_destroy(&ch->base);
        return st;
    }
    ch->base.ort_version_supported = plus_ep_version;
    ch->base.CreateState = create_state;
    ch->base.Compute = chain_compute;
    ch->base.ReleaseState = release_state;
    *out = &ch->base;
    return NULL;
}

/* ---- a run ---- */

const OrtValue* plus_ep_run_input(plus_ep_run* r, int slot) { return slot < 0 ? NULL : r->val[slot]; }
OrtKernelContext* plus_ep_run_context(plus_ep_run* r) { return r->kctx; }

/* An intermediate of `bytes` in the run's memory (host when staging, else device on the node's stream). */
static OrtStatus* make_value(plus_ep_run* r, int slot, int dtype, const int64_t* dims, int rank, size_t bytes,
                             OrtValue** v) {
    plus_ep* ep = r->ch->ep;
    char err[PLUS_ERR_LEN];
    OrtStatus* st;
    if (ep->mode != PLUS_MODE_GPU) {
        if (!(r->host_mem[slot] = malloc(bytes ? bytes : 1))) return oom();
        st = ORT_CALL(plus_ep_api, CreateTensorWithDataAsOrtValue)(cpu_info(), r->host_mem[slot], bytes, dims,
                                                                    (size_t)rank, dtype, v);
    } else {
        if (plus_ep_temp_alloc(ep->drv, ep->ordinal, r->ctx, (CUstream)r->stream, r->foreign, bytes ? bytes : 1,
                               &r->dev_mem[slot], err, sizeof err))
            return plus_ep_status(ORT_FAIL, "PlusEP node '%s': %s", r->ch->node, err);
        st = ORT_CALL(plus_ep_api, CreateTensorWithDataAsOrtValue)(plus_ep_memory_info(ep->ordinal),
                                                                    (void*)(uintptr_t)r->dev_mem[slot], bytes, dims,
                                                                    (size_t)rank, dtype, v);
    }
    if (!st) r->owned[slot] = *v;
    return st;
}

OrtStatus* plus_ep_run_output(plus_ep_run* r, int slot, int dtype, const int64_t* dims, int rank, OrtValue** v) {
    *v = NULL;
    if (slot < 0) return NULL;
    const chain_slot* sl = &r->ch->slots[slot];
    OrtStatus* st;
    if (sl->ctx_out >= 0) {
        st = ORT_CALL(plus_ep_api, KernelContext_GetOutput)(r->kctx, (size_t)sl->ctx_out, dims, (size_t)rank, v);
    } else {
        long long elems = 1;
        for (int d = 0; d < rank && elems >= 0; d++)
            if (dims[d] < 0 || __builtin_mul_overflow(elems, (long long)dims[d], &elems)) elems = -1;
        long long bytes = elems < 0 ? -1 : plus_tensor_bytes(dtype, elems);
        if (bytes < 0) return plus_ep_status(ORT_FAIL, "PlusEP node '%s': tensor '%s' has no size", r->ch->node, sl->name);
        st = make_value(r, slot, dtype, dims, rank, (size_t)bytes, v);
    }
    if (!st) r->val[slot] = *v;
    return st;
}

/* Copy a tensor between the memories its values are in (host to host by memcpy). */
static OrtStatus* copy_value(plus_ep_run* r, const OrtValue* src, OrtValue* dst) {
    plus_ep* ep = r->ch->ep;
    if (ep->mode == PLUS_MODE_GPU) return plus_ep_copy_value(ep->drv, src, dst, (CUstream)r->stream);
    void* d = NULL;
    const void* s = NULL;
    size_t bytes = 0;
    OrtStatus* st = ORT_CALL(plus_ep_api, GetTensorData)(src, &s);
    if (!st) st = ORT_CALL(plus_ep_api, GetTensorMutableData)(dst, &d);
    if (!st) st = ORT_CALL(plus_ep_api, GetTensorSizeInBytes)(src, &bytes);
    if (!st && bytes) memcpy(d, s, bytes);
    return st;
}

/* The values a host part reads, in host memory (a GPU run copies device tensors back once the node's
 * stream has finished them). */
static OrtStatus* run_host(plus_ep_run* r, chain_part* p) {
    plus_ep* ep = r->ch->ep;
    const OrtValue** in = calloc(p->n_in + 1, sizeof *in);
    OrtValue** tmp = calloc(p->n_in + 1, sizeof *tmp);
    void** tmp_mem = calloc(p->n_in + 1, sizeof *tmp_mem);
    OrtValue** outs = calloc(p->n_out + 1, sizeof *outs);
    const char** on = calloc(p->n_out + 1, sizeof *on);
    OrtStatus* st = in && tmp && tmp_mem && outs && on ? NULL : oom();
    int copied = 0;
    for (size_t j = 0; j < p->n_in && !st; j++) {
        const OrtValue* v = r->val[p->in_slot[j]];
        in[j] = v;
        if (!v) {
            st = plus_ep_status(ORT_FAIL, "PlusEP node '%s': host part '%s' lacks input '%s'", r->ch->node, p->node,
                                p->in_names[j]);
            break;
        }
        if (ep->mode != PLUS_MODE_GPU || !plus_ep_on_gpu(EP_CALL(plus_ep_epapi, Value_GetMemoryDevice)(v))) continue;
        int dtype, rank;
        int64_t dims[PLUS_MAX_RANK];
        long long elems;
        void* data;
        int deep = 0;
        if ((st = plus_ort_describe(plus_ep_api, v, &dtype, &rank, dims, &elems, &data, &deep))) break;
        long long bytes = plus_tensor_bytes(dtype, elems);
        if (bytes < 0 || !(tmp_mem[j] = malloc(bytes ? (size_t)bytes : 1))) {
            st = oom();
            break;
        }
        if (!(st = ORT_CALL(plus_ep_api, CreateTensorWithDataAsOrtValue)(cpu_info(), tmp_mem[j], (size_t)bytes, dims,
                                                                         (size_t)rank, dtype, &tmp[j])) &&
            !(st = plus_ep_copy_value(ep->drv, v, tmp[j], (CUstream)r->stream)))
            in[j] = tmp[j], copied = 1;
    }
    if (!st && copied && r->stream) {   /* the copies (and the kernels before them) done */
        CUresult cr = ep->drv->cuStreamSynchronize((CUstream)r->stream);
        if (cr) st = plus_ep_status(ORT_FAIL, "PlusEP node '%s': synchronising before host part '%s' failed (%d)",
                                    r->ch->node, p->node, (int)cr);
    }
    for (size_t j = 0; j < p->n_out; j++) on[j] = p->out_names[j];
    if (!st) {
        st = ORT_CALL(plus_ep_api, Run)(p->sess, NULL, (const char* const*)p->in_names, in, p->n_in, on, p->n_out, outs);
        if (st) {
            OrtStatus* w = plus_ep_status(ORT_FAIL, "PlusEP node '%s': host part '%s': %s", r->ch->node, p->node,
                                          ORT_CALL(plus_ep_api, GetErrorMessage)(st));
            plus_ep_drop(st);
            st = w;
        }
    }
    for (size_t j = 0; j < p->n_out && !st; j++) {
        int sl = p->out_slot[j];
        if (sl < 0 || !outs[j]) continue;
        const chain_slot* s = &r->ch->slots[sl];
        if (s->ctx_out < 0 && ep->mode != PLUS_MODE_GPU) {   /* host memory already: the run keeps ORT's value */
            r->val[sl] = r->owned[sl] = outs[j];
            outs[j] = NULL;
            continue;
        }
        int dtype, rank;
        int64_t dims[PLUS_MAX_RANK];
        long long elems;
        void* data;
        int deep = 0;
        OrtValue* dst = NULL;
        if (!(st = plus_ort_describe(plus_ep_api, outs[j], &dtype, &rank, dims, &elems, &data, &deep)) &&
            !(st = plus_ep_run_output(r, sl, dtype, dims, rank, &dst)))
            st = copy_value(r, outs[j], dst);
    }
    for (size_t j = 0; j < p->n_out && outs; j++)
        if (outs[j]) ORT_CALL(plus_ep_api, ReleaseValue)(outs[j]);
    for (size_t j = 0; tmp && j < p->n_in; j++) {
        if (tmp[j]) ORT_CALL(plus_ep_api, ReleaseValue)(tmp[j]);
        free(tmp_mem[j]);
    }
    free(in), free(tmp), free(tmp_mem), free(outs), free(on);
    return st;
}

/* gpu: the constants in device memory, uploaded once on the first run's stream. */
static OrtStatus* upload_constants(plus_ep_run* r) {
    plus_ep_chain* ch = r->ch;
    plus_ep* ep = ch->ep;
    OrtStatus* st = NULL;
    pthread_mutex_lock(&ch->upload);
    for (size_t c = 0; c < ch->n_consts && !st; c++) {
        chain_const* k = &ch->consts[c];
        if (k->dev_value) continue;
        CUresult cr = ep->drv->cuCtxPushCurrent(r->ctx);
        if (!cr) {
            cr = ep->drv->cuMemAlloc(&k->dev, k->c.bytes ? k->c.bytes : 1);
            CUcontext popped;
            ep->drv->cuCtxPopCurrent(&popped);
        }
        if (!cr && k->c.bytes) cr = plus_ep_htod(ep->drv, r->ctx, k->dev, k->c.data, k->c.bytes, (CUstream)r->stream);
        if (cr) {
            char e[128];
            plus_cu_error(ep->drv, cr, e, sizeof e);
            st = plus_ep_status(ORT_FAIL, "PlusEP node '%s': uploading constant '%s' failed: %s", ch->node, k->c.name, e);
            break;
        }
        st = ORT_CALL(plus_ep_api, CreateTensorWithDataAsOrtValue)(plus_ep_memory_info(ep->ordinal),
                                                                    (void*)(uintptr_t)k->dev, k->c.bytes, k->c.dims,
                                                                    (size_t)k->c.rank, k->c.dtype, &k->dev_value);
    }
    pthread_mutex_unlock(&ch->upload);
    return st;
}

static OrtStatus* chain_compute(OrtNodeComputeInfo* self, void* state, OrtKernelContext* kctx) {
    (void)state;
    plus_ep_chain* ch = (plus_ep_chain*)self;
    plus_ep* ep = ch->ep;
    plus_ep_run r = {.ch = ch, .kctx = kctx};
    size_t n = ch->n_slots ? ch->n_slots : 1;
    r.val = calloc(n, sizeof *r.val);
    r.owned = calloc(n, sizeof *r.owned);
    r.host_mem = calloc(n, sizeof *r.host_mem);
    r.dev_mem = calloc(n, sizeof *r.dev_mem);
    OrtStatus* st = r.val && r.owned && r.host_mem && r.dev_mem ? NULL : oom();
    if (!st && ep->mode == PLUS_MODE_GPU) {
        st = plus_ep_node_stream(ep, kctx, &r.ctx, &r.stream, &r.foreign);
        if (!st && ch->has_host && ep->capturing)
            st = plus_ep_status(ORT_EP_FAIL, "PlusEP node '%s' runs shape computations on the CPU between its kernels; "
                                "cuda_graph=1 cannot capture it", ch->node);
        if (!st && ch->n_consts) st = upload_constants(&r);
    }
    for (size_t s = 0; s < ch->n_slots && !st; s++) {
        const chain_slot* sl = &ch->slots[s];
        if (sl->ctx_in >= 0) st = ORT_CALL(plus_ep_api, KernelContext_GetInput)(kctx, (size_t)sl->ctx_in, &r.val[s]);
        else if (sl->konst >= 0)
            r.val[s] = ep->mode == PLUS_MODE_GPU ? ch->consts[sl->konst].dev_value : ch->consts[sl->konst].host;
    }
    for (size_t i = 0; i < ch->n_parts && !st; i++)
        st = ch->parts[i].kind == PLUS_PART_KERNEL ? plus_ep_kernel_run(ch->parts[i].k, &r) : run_host(&r, &ch->parts[i]);
    for (size_t s = 0; s < ch->n_slots && r.owned; s++) {
        if (r.owned[s]) ORT_CALL(plus_ep_api, ReleaseValue)(r.owned[s]);
        free(r.host_mem[s]);
        if (r.dev_mem[s]) plus_ep_temp_free(ep->drv, ep->ordinal, r.ctx, (CUstream)r.stream, r.foreign, r.dev_mem[s]);
    }
    free(r.val), free(r.owned), free(r.host_mem), free(r.dev_mem);
    return st;
}

/* ---- the EPContext node ---- */

OrtStatus* plus_ep_chain_context_node(const OrtNodeComputeInfo* info, const plus_ctx_config* cfg,
                                      const OrtGraph* graph, const OrtNode* fused, OrtNode** out) {
    const plus_ep_chain* ch = (const plus_ep_chain*)info;
    plus_ctx_part* parts = calloc(ch->n_parts, sizeof *parts);
    plus_ctx_const* consts = calloc(ch->n_consts + 1, sizeof *consts);
    size_t n_refs = 0;
    for (size_t i = 0; i < ch->n_parts; i++) n_refs += ch->parts[i].n_in + ch->parts[i].n_out;
    char (*refs)[24] = calloc(n_refs + 1, sizeof *refs);
    const char** names = calloc(n_refs + 1, sizeof *names);
    if (!parts || !consts || !refs || !names) {
        free(parts), free(consts), free(refs), free(names);
        return oom();
    }
    /* the node's own inputs and outputs by position ("#k"), inner tensors by name */
    size_t r = 0;
    for (size_t i = 0; i < ch->n_parts; i++) {
        const chain_part* p = &ch->parts[i];
        plus_ctx_part* q = &parts[i];
        q->kind = p->kind;
        q->node = p->node;
        q->inputs = names + r;
        q->n_inputs = p->n_in;
        for (size_t j = 0; j < p->n_in; j++, r++) {
            int sl = p->in_slot[j];
            if (sl >= 0 && ch->slots[sl].ctx_in >= 0) snprintf(refs[r], sizeof refs[r], "#%d", ch->slots[sl].ctx_in);
            names[r] = sl < 0 ? "" : ch->slots[sl].ctx_in >= 0 ? refs[r] : ch->slots[sl].name;
        }
        q->outputs = names + r;
        q->n_outputs = p->n_out;
        for (size_t j = 0; j < p->n_out; j++, r++) {
            int sl = p->out_slot[j];
            if (sl >= 0 && ch->slots[sl].ctx_out >= 0) snprintf(refs[r], sizeof refs[r], "#%d", ch->slots[sl].ctx_out);
            names[r] = sl < 0 ? "" : ch->slots[sl].ctx_out >= 0 ? refs[r] : ch->slots[sl].name;
        }
        q->plan = p->plan;
        q->packs = p->packs;
        q->n_packs = p->n_packs;
        q->signature = p->signature;
        plus_ctx_fused_view(&p->fused, q);
        q->model = p->model;
        q->model_size = p->model_size;
    }
    for (size_t c = 0; c < ch->n_consts; c++)
        consts[c] = (plus_ctx_const){.name = ch->consts[c].c.name, .dtype = ch->consts[c].c.dtype,
                                     .rank = ch->consts[c].c.rank, .dims = ch->consts[c].c.dims,
                                     .data = ch->consts[c].c.data, .bytes = ch->consts[c].c.bytes};
    OrtStatus* st = plus_ctx_make_node(cfg, graph, fused, parts, ch->n_parts, consts, ch->n_consts, out);
    free(parts), free(consts), free(refs), free(names);
    return st;
}
