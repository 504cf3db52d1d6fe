/* The per-node kernel object: plan + image packs, modules loaded lazily per CUDA context, launches. */
#define _POSIX_C_SOURCE 200809L
#include "kernel.h"
#include "tmap.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PLUS_MAX_CTX 16   /* distinct CUDA contexts (devices) one node runs on */

typedef struct {
    CUcontext ctx;
    int pack, smem_optin, group;           /* group: the plan's route group serving this pack's arch */
    CUmodule mod[PLUS_MAX_KERNELS];        /* per kernel line; lines sharing an image share the module */
    unsigned char own[PLUS_MAX_KERNELS];   /* this line loaded (and unloads) mod[i] */
    CUfunction fn[PLUS_MAX_KERNELS];
    int smem_set[PLUS_MAX_KERNELS];        /* dynamic smem limit set on fn[i] (guarded by lock) */
} ctx_cache;

struct plus_kernel {
    char node[PLUS_NAME_LEN];
    plus_plan plan;
    int n_packs;
    plus_pack packs[PLUS_MAX_ARCHS];
    uint8_t* pack_mem[PLUS_MAX_ARCHS];
    char** in_names;
    size_t n_names;
    const plus_driver* drv;                /* set by the first load; used to unload */
    pthread_mutex_t lock;                  /* module loads and smem attribute changes */
    atomic_int n_ctx;                      /* cache[0 .. n_ctx) are complete and read without the lock */
    ctx_cache cache[PLUS_MAX_CTX];
};

static int nerr(const plus_kernel* k, char* err, size_t errlen, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int nerr(const plus_kernel* k, char* err, size_t errlen, const char* fmt, ...) {
    int n = snprintf(err, errlen, "PlusEP node '%s': ", k->node);
    if (n < 0 || (size_t)n >= errlen) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

/* Prefix an error that a plan function already wrote into err. */
static int prefix(const plus_kernel* k, char* err, size_t errlen) {
    char tmp[PLUS_ERR_LEN];
    snprintf(tmp, sizeof tmp, "%s", err);
    return nerr(k, err, errlen, "%s", tmp);
}

const plus_plan* plus_kernel_plan(const plus_kernel* k) { return &k->plan; }
const char* plus_kernel_node(const plus_kernel* k) { return k->node; }

int plus_kernel_create(const char* node, const char* plan_text, const plus_pack_src* packs, int n_packs,
                       const char* const* input_names, size_t n_names, plus_kernel** out, char* err,
                       size_t errlen) {
    plus_kernel* k = calloc(1, sizeof *k);
    if (!k) return snprintf(err, errlen, "PlusEP: out of memory"), -1;
    snprintf(k->node, sizeof k->node, "%s", node ? node : "");
    pthread_mutex_init(&k->lock, NULL);
    *out = NULL;
    if (plus_plan_parse(plan_text, &k->plan, err, errlen)) {
        if (!k->node[0]) snprintf(k->node, sizeof k->node, "?");
        prefix(k, err, errlen);
        free(k->plan.items), k->plan.items = NULL;
        plus_kernel_destroy(k);
        return -1;
    }
    if (!k->node[0]) snprintf(k->node, sizeof k->node, "%s", k->plan.node[0] ? k->plan.node : "?");
    if (plus_tmap_parse(&k->plan, err, errlen)) {
        prefix(k, err, errlen);
        goto fail;
    }
    if (n_packs > PLUS_MAX_ARCHS) {
        nerr(k, err, errlen, "more than %d image packs", PLUS_MAX_ARCHS);
        goto fail;
    }
    for (int i = 0; i < n_packs; i++) {
        plus_pack* p = &k->packs[i];
        snprintf(p->arch, sizeof p->arch, "%s", packs[i].arch);
        k->pack_mem[i] = malloc(packs[i].size ? packs[i].size : 1);
        if (!k->pack_mem[i]) {
            nerr(k, err, errlen, "out of memory");
            goto fail;
        }
        k->n_packs = i + 1;
        memcpy(k->pack_mem[i], packs[i].data, packs[i].size);
        if (plus_pack_parse(k->pack_mem[i], packs[i].size, p, err, errlen)) {
            prefix(k, err, errlen);
            goto fail;
        }
        int g = plus_plan_group_of(&k->plan, p->arch);
        if (g < 0) {
            nerr(k, err, errlen, "the plan's `arch` records have no routes for plus_images_%s", p->arch);
            goto fail;
        }
        for (int j = 0; j < k->plan.n_kernels; j++)
            if (k->plan.route_group[k->plan.kernel[j].route] == g && (uint32_t)k->plan.kernel[j].image >= p->count) {
                nerr(k, err, errlen, "plan line %d `%s` uses image %d but plus_images_%s holds %u images",
                     k->plan.kernel[j].line, plus_plan_line(&k->plan, k->plan.kernel[j].line),
                     k->plan.kernel[j].image, p->arch, p->count);
                goto fail;
            }
    }
    if (input_names && n_names) {
        k->in_names = calloc(n_names, sizeof(char*));
        if (!k->in_names) goto oom;
        k->n_names = n_names;
        for (size_t i = 0; i < n_names; i++)
            if (!(k->in_names[i] = strdup(input_names[i] ? input_names[i] : ""))) goto oom;
    }
    *out = k;
    return 0;
oom:
    nerr(k, err, errlen, "out of memory");
fail:
    plus_kernel_destroy(k);
    return -1;
}

void plus_kernel_destroy(plus_kernel* k) {
    if (!k) return;
    int n = atomic_load(&k->n_ctx);
    for (int c = 0; c < n && k->drv; c++) {
        ctx_cache* cc = &k->cache[c];
        if (k->drv->cuCtxPushCurrent(cc->ctx)) continue;   /* context gone (process exit): nothing to do */
        for (int i = 0; i < k->plan.n_kernels; i++)
            if (cc->own[i]) k->drv->cuModuleUnload(cc->mod[i]);
        CUcontext popped;
        k->drv->cuCtxPopCurrent(&popped);
    }
    for (int i = 0; i < k->n_packs; i++) free(k->pack_mem[i]);
    for (size_t i = 0; i < k->n_names; i++) free(k->in_names[i]);
    free(k->in_names);
    plus_plan_free(&k->plan);
    pthread_mutex_destroy(&k->lock);
    free(k);
}

int plus_kernel_bind(const plus_kernel* k, const plus_tensor_desc* in, size_t n_in, size_t n_out,
                     plus_binding* b, char* err, size_t errlen) {
    const char* const* names = n_in <= k->n_names ? (const char* const*)k->in_names : NULL;
    if (plus_bind(&k->plan, in, n_in, n_out, names, b, err, errlen)) return prefix(k, err, errlen);
    if (k->plan.tmaps) {   /* the element counts of the tensors the bound routes' tensor maps read */
        int64_t in_elems[PLUS_MAX_IN];
        for (size_t i = 0; i < n_in && i < PLUS_MAX_IN; i++) {
            in_elems[i] = in[i].present ? 1 : -1;
            for (int d = 0; in[i].present && d < in[i].rank; d++) in_elems[i] *= in[i].dims[d];
        }
        if (plus_tmap_check(&k->plan, &b->env, b->group_route, in_elems, n_in, b->out_elems, b->scratch_bytes, names,
                            err, errlen))
            return prefix(k, err, errlen);
    }
    return 0;
}

int plus_kernel_check_wiring(const plus_kernel* k, const int* in_present, size_t n_in, const int* out_present,
                             size_t n_out, char* err, size_t errlen) {
    const char* const* names = n_in <= k->n_names ? (const char* const*)k->in_names : NULL;
    if (plus_plan_check_wiring(&k->plan, in_present, n_in, out_present, n_out, names, err, errlen))
        return prefix(k, err, errlen);
    return 0;
}

static int cu_fail(const plus_kernel* k, const plus_driver* d, CUresult r, char* err, size_t errlen,
                   const char* what) {
    char e[128];
    plus_cu_error(d, r, e, sizeof e);
    return nerr(k, err, errlen, "%s failed: %s", what, e);
}

int plus_kernel_read_shape_inputs(plus_kernel* k, const plus_driver* d, CUcontext ctx, CUstream stream,
                                  plus_tensor_desc* in, const void* const* dev, size_t n_in, plus_host_values* vals,
                                  char* err, size_t errlen) {
    const plus_plan* p = &k->plan;
    if (!p->n_shapev) return 0;
    int need = 0;   /* a present shape tensor not already in host memory */
    for (size_t i = 0; i < n_in && i < (size_t)p->n_in; i++) need |= p->in[i].host && in[i].present && !in[i].host;
    if (!need) return 0;
    CUresult r = 0;
    if (!ctx) r = stream ? d->cuStreamGetCtx(stream, &ctx) : d->cuCtxGetCurrent(&ctx);
    if (r) return cu_fail(k, d, r, err, errlen, stream ? "cuStreamGetCtx" : "cuCtxGetCurrent");
    if (!ctx) return nerr(k, err, errlen, "no current CUDA context");
    if ((r = d->cuCtxPushCurrent(ctx))) return cu_fail(k, d, r, err, errlen, "cuCtxPushCurrent");
    int rc = 0, used = 0;
    r = stream ? d->cuStreamSynchronize(stream) : d->cuCtxSynchronize();
    if (r) rc = cu_fail(k, d, r, err, errlen, "synchronising before reading a shape tensor");
    for (size_t i = 0; i < n_in && i < (size_t)p->n_in && !rc; i++) {
        if (!p->in[i].host || !in[i].present || !dev[i] || in[i].host) continue;
        /* Only a tensor of the plan's element type and rank is copied (the copy's length follows from
         * them); any other is left to plus_bind, which reports it. */
        if (in[i].dtype != p->in[i].dtype || in[i].rank != p->in[i].rank) continue;
        int last = -1;   /* the highest element any shapev line reads */
        for (int j = 0; j < p->n_shapev; j++)
            if (p->shapev[j].input == (int)i && p->shapev[j].elem > last) last = p->shapev[j].elem;
        int64_t n = in[i].rank == 0 ? 1 : in[i].dims[0];
        if (last < 0 || n <= 0) continue;
        if (last >= n) last = (int)n - 1;   /* plus_bind reports the missing element */
        size_t elsize = p->in[i].dtype == 7 ? 8 : 4;   /* int64 or int32 (plan.c: shapev inputs) */
        r = d->cuMemcpyDtoH(vals->v[used], (CUdeviceptr)(uintptr_t)dev[i], elsize * (size_t)(last + 1));
        if (r) rc = cu_fail(k, d, r, err, errlen, "copying a shape tensor to the host (cuMemcpyDtoH)");
        else in[i].host = vals->v[used++];
    }
    CUcontext popped;
    d->cuCtxPopCurrent(&popped);
    return rc;
}

/* Load every kernel line's module and function for the current context (lock held, ctx current). */
static int load_ctx(plus_kernel* k, const plus_driver* d, CUcontext ctx, ctx_cache* cc, char* err, size_t errlen) {
    CUdevice dev;
    int major, minor, optin = PLUS_DEFAULT_SMEM;
    CUresult r;
    memset(cc, 0, sizeof *cc);
    cc->ctx = ctx;
    if ((r = d->cuCtxGetDevice(&dev))) return cu_fail(k, d, r, err, errlen, "cuCtxGetDevice");
    if ((r = d->cuDeviceGetAttribute(&major, PLUS_CU_ATTR_CC_MAJOR, dev)) ||
        (r = d->cuDeviceGetAttribute(&minor, PLUS_CU_ATTR_CC_MINOR, dev)))
        return cu_fail(k, d, r, err, errlen, "cuDeviceGetAttribute(compute capability)");
    if (d->cuDeviceGetAttribute(&optin, PLUS_CU_ATTR_SMEM_OPTIN, dev)) optin = PLUS_DEFAULT_SMEM;
    cc->smem_optin = optin;
    cc->pack = plus_pack_select(k->packs, k->n_packs, major, minor, err, errlen);
    int jit = 0;   /* no cubin for this arch: the PTX of an older arch, JIT-compiled by the driver */
    if (cc->pack < 0 && (cc->pack = plus_pack_select_ptx(k->packs, k->n_packs, major, minor)) >= 0) jit = 1;
    if (cc->pack < 0) return prefix(k, err, errlen);
    const plus_pack* p = &k->packs[cc->pack];
    cc->group = plus_plan_group_of(&k->plan, p->arch);   /* >= 0: checked at creation */
    int rc = 0;
    for (int i = 0; i < k->plan.n_kernels && !rc; i++) {
        const plus_kernel_spec* ks = &k->plan.kernel[i];
        if (k->plan.route_group[ks->route] != cc->group) continue;   /* another arch's kernels */
        int j = 0;
        while (j < i && (k->plan.kernel[j].image != ks->image || k->plan.route_group[k->plan.kernel[j].route] != cc->group))
            j++;
        if (j < i) {
            cc->mod[i] = cc->mod[j];
        } else {
            const uint8_t* img;
            size_t n;
            void* aligned = NULL;
            if (jit) plus_pack_ptx(p, (uint32_t)ks->image, (const char**)&img, &n);
            else plus_pack_image(p, (uint32_t)ks->image, &img, &n);
            if (!jit && (uintptr_t)img % 16) {   /* the driver reads the ELF in place: give it aligned memory */
                if (!(aligned = malloc(n))) {
                    rc = nerr(k, err, errlen, "out of memory");
                    break;
                }
                memcpy(aligned, img, n);
                img = aligned;
            }
            r = d->cuModuleLoadData(&cc->mod[i], img);
            free(aligned);
            if (r) {
                char e[PLUS_ERR_LEN / 2];
                plus_cu_error(d, r, e, sizeof e);
                rc = nerr(k, err, errlen, "cuModuleLoadData of image %d of plus_images_%s%s failed: %s", ks->image,
                          p->arch, jit ? " (PTX)" : "", e);
                break;
            }
            cc->own[i] = 1;
        }
        if ((r = d->cuModuleGetFunction(&cc->fn[i], cc->mod[i], ks->entry))) {
            char e[128];
            plus_cu_error(d, r, e, sizeof e);
            rc = nerr(k, err, errlen, "kernel entry '%s' not found in image %d of plus_images_%s (%s; plan line %d)",
                      ks->entry, ks->image, p->arch, e, ks->line);
        }
    }
    if (rc)   /* unload what this attempt loaded */
        for (int i = 0; i < k->plan.n_kernels; i++)
            if (cc->own[i]) {
                d->cuModuleUnload(cc->mod[i]);
                cc->own[i] = 0;
            }
    return rc;
}

/* The cache entry for ctx (ctx current), loading it on first use. */
static ctx_cache* get_ctx(plus_kernel* k, const plus_driver* d, CUcontext ctx, char* err, size_t errlen) {
    int n = atomic_load_explicit(&k->n_ctx, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (k->cache[i].ctx == ctx) return &k->cache[i];
    pthread_mutex_lock(&k->lock);
    ctx_cache* cc = NULL;
    n = atomic_load_explicit(&k->n_ctx, memory_order_relaxed);
    for (int i = 0; i < n; i++)
        if (k->cache[i].ctx == ctx) cc = &k->cache[i];
    if (!cc && n == PLUS_MAX_CTX) nerr(k, err, errlen, "runs on more than %d CUDA contexts", PLUS_MAX_CTX);
    else if (!cc && !load_ctx(k, d, ctx, &k->cache[n], err, errlen)) {
        k->drv = d;
        cc = &k->cache[n];
        atomic_store_explicit(&k->n_ctx, n + 1, memory_order_release);
    }
    pthread_mutex_unlock(&k->lock);
    return cc;
}

static int ensure_smem(plus_kernel* k, const plus_driver* d, ctx_cache* cc, int i, unsigned smem, char* err,
                       size_t errlen) {
    if (smem <= PLUS_DEFAULT_SMEM) return 0;
    const plus_kernel_spec* ks = &k->plan.kernel[i];
    if (smem > (unsigned)cc->smem_optin)
        return nerr(k, err, errlen, "kernel '%s' needs %u bytes of dynamic shared memory; the device allows %d (plan line %d)",
                    ks->entry, smem, cc->smem_optin, ks->line);
    int rc = 0;
    pthread_mutex_lock(&k->lock);   /* only while the limit grows: the attribute never shrinks */
    if ((unsigned)cc->smem_set[i] < smem) {
        CUresult r = d->cuFuncSetAttribute(cc->fn[i], PLUS_CU_FUNC_MAX_DYN_SMEM, (int)smem);
        if (r) rc = cu_fail(k, d, r, err, errlen, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
        else cc->smem_set[i] = (int)smem;
    }
    pthread_mutex_unlock(&k->lock);
    return rc;
}

int plus_kernel_launch(plus_kernel* k, const plus_driver* d, CUcontext ctx, CUstream stream,
                       const plus_binding* b, PlusArgs* args, char* err, size_t errlen) {
    if (b->empty) return 0;   /* every output has 0 elements: no kernel has anything to write */
    CUresult r = 0;
    if (!ctx) r = stream ? d->cuStreamGetCtx(stream, &ctx) : d->cuCtxGetCurrent(&ctx);
    if (r) return cu_fail(k, d, r, err, errlen, stream ? "cuStreamGetCtx" : "cuCtxGetCurrent");
    if (!ctx) return nerr(k, err, errlen, "no current CUDA context");
    if ((r = d->cuCtxPushCurrent(ctx))) return cu_fail(k, d, r, err, errlen, "cuCtxPushCurrent");
    int rc = 0;
    ctx_cache* cc = get_ctx(k, d, ctx, err, errlen);
    if (!cc) rc = -1;
    memcpy(args->v, b->env.v, sizeof args->v);
    if (!rc && !stream && (r = d->cuCtxSynchronize())) rc = cu_fail(k, d, r, err, errlen, "cuCtxSynchronize");
    for (int i = 0; i < k->plan.n_kernels && !rc; i++) {
        const plus_kernel_spec* ks = &k->plan.kernel[i];
        plus_geom g;
        if (ks->route != b->group_route[cc->group]) continue;
        int skip = plus_kernel_geom(&k->plan, ks, &b->env, &g, err, errlen);
        if (skip < 0) rc = prefix(k, err, errlen);
        if (skip) continue;
        if ((rc = ensure_smem(k, d, cc, i, g.smem, err, errlen))) break;
        /* tensor maps (tmap.h): the line's second parameter, encoded from this run's pointers */
        unsigned char map_mem[PLUS_TMAPS_PER_KERNEL * PLUS_TMAP_BYTES + 64];
        void* maps = (void*)(((uintptr_t)map_mem + 63) & ~(uintptr_t)63);
        int n_maps = 0;
        if (plus_tmap_encode(&k->plan, i, d, &b->env, args, maps, &n_maps, err, errlen)) {
            rc = prefix(k, err, errlen);
            break;
        }
        void* params[] = {args, maps};
        r = d->cuLaunchKernel(cc->fn[i], g.grid[0], g.grid[1], g.grid[2], g.block[0], g.block[1], g.block[2], g.smem,
                              stream, params, NULL);
        if (r) {
            char e[PLUS_ERR_LEN / 2];   /* an emulated driver's error names carry the interpreter's message */
            plus_cu_error(d, r, e, sizeof e);
            rc = nerr(k, err, errlen, "cuLaunchKernel of '%s' (grid %u,%u,%u block %u,%u,%u smem %u; plan line %d) failed: %s",
                      ks->entry, g.grid[0], g.grid[1], g.grid[2], g.block[0], g.block[1], g.block[2], g.smem, ks->line, e);
        }
    }
    if (!rc && !stream && (r = d->cuCtxSynchronize())) rc = cu_fail(k, d, r, err, errlen, "cuCtxSynchronize");
    CUcontext popped;
    d->cuCtxPopCurrent(&popped);
    return rc;
}

/* The primary context of device 0, retained once per process for the host-staging path. */
static pthread_once_t g_primary_once = PTHREAD_ONCE_INIT;
static CUcontext g_primary;
static CUresult g_primary_err;
static void retain_primary(void) {
    const plus_driver* d = plus_driver_get(NULL);   /* the process's one driver */
    CUdevice dev;
    g_primary_err = d ? d->cuDeviceGet(&dev, 0) : 100 /* CUDA_ERROR_NO_DEVICE */;
    if (!g_primary_err) g_primary_err = d->cuDevicePrimaryCtxRetain(&g_primary, dev);
}

int plus_kernel_run_staged(plus_kernel* k, const plus_driver* d, const plus_host_in* in, size_t n_in,
                           const plus_host_out* out, size_t n_out, const plus_binding* b, char* err,
                           size_t errlen) {
    if (b->empty) return 0;
    pthread_once(&g_primary_once, retain_primary);
    if (g_primary_err) return cu_fail(k, d, g_primary_err, err, errlen, "retaining the primary context of device 0");
    CUresult r = d->cuCtxPushCurrent(g_primary);
    if (r) return cu_fail(k, d, r, err, errlen, "cuCtxPushCurrent");
    PlusArgs args;
    memset(&args, 0, sizeof args);
    CUdeviceptr dp[PLUS_MAX_IN + PLUS_MAX_OUT + PLUS_MAX_SCRATCH] = {0};
    int rc = 0;
    for (size_t i = 0; i < n_in && !rc; i++) {
        if (!in[i].host || !in[i].bytes) continue;
        if ((r = d->cuMemAlloc(&dp[i], in[i].bytes)) || (r = d->cuMemcpyHtoD(dp[i], in[i].host, in[i].bytes)))
            rc = cu_fail(k, d, r, err, errlen, "staging an input (cuMemAlloc/cuMemcpyHtoD)");
        args.in[i] = (const void*)(uintptr_t)dp[i];
    }
    for (size_t o = 0; o < n_out && !rc; o++) {
        if (!out[o].bytes) continue;
        if ((r = d->cuMemAlloc(&dp[PLUS_MAX_IN + o], out[o].bytes)))
            rc = cu_fail(k, d, r, err, errlen, "staging an output (cuMemAlloc)");
        args.out[o] = (void*)(uintptr_t)dp[PLUS_MAX_IN + o];
    }
    for (int s = 0; s < PLUS_MAX_SCRATCH && !rc; s++) {
        if (!b->scratch_bytes[s]) continue;
        if ((r = d->cuMemAlloc(&dp[PLUS_MAX_IN + PLUS_MAX_OUT + s], (size_t)b->scratch_bytes[s])))
            rc = cu_fail(k, d, r, err, errlen, "allocating scratch (cuMemAlloc)");
        args.scratch[s] = (void*)(uintptr_t)dp[PLUS_MAX_IN + PLUS_MAX_OUT + s];
    }
    if (!rc) rc = plus_kernel_launch(k, d, g_primary, NULL, b, &args, err, errlen);
    for (size_t o = 0; o < n_out && !rc; o++)
        if (out[o].bytes && (r = d->cuMemcpyDtoH(out[o].host, dp[PLUS_MAX_IN + o], out[o].bytes)))
            rc = cu_fail(k, d, r, err, errlen, "copying an output back (cuMemcpyDtoH)");
    for (size_t i = 0; i < sizeof dp / sizeof dp[0]; i++)
        if (dp[i]) d->cuMemFree(dp[i]);
    CUcontext popped;
    d->cuCtxPopCurrent(&popped);
    return rc;
}
