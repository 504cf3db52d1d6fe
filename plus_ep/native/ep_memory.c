/* PlusEP's device memory on the CUDA driver API: the allocator ORT asks the factory for (one per GPU
 * EP device), the data transfer (host <-> device, device <-> device), PlusEP's own MemcpyFromHost /
 * MemcpyToHost kernels, temporary launch memory and the per-device stream.
 *
 * Why PlusEP registers Memcpy kernels (OrtEp::GetKernelRegistry): when a graph input is read both by a
 * CPU node and by a PlusEP node (BERT's input_ids feeds a Shape), ONNX Runtime inserts a MemcpyFromHost
 * before the PlusEP node. A plugin EP without Memcpy kernels gets ORT's CPU-EP fallback kernel, whose
 * output the allocation planner places in CPU memory (ORT 1.30/1.31; microsoft/onnxruntime PR #27272
 * is still open), so the fused node received a host pointer where it needs device memory. With PlusEP's
 * kernels (input in CPU memory, output in PlusEP's device memory) ORT plans the output on the device.
 *
 * Streams: ORT hands PlusEP nodes a stream only when a stream-aware EP shares the device (the CUDA EP);
 * otherwise every launch and copy goes on one stream per device that PlusEP creates in the primary
 * context, with the default (blocking) flags: the driver orders the synchronous copies ORT's data
 * transfer makes on the legacy stream after the work queued there, so no launch needs a
 * synchronisation; the EP synchronises where ORT needs results (MemcpyToHost, OnRunEnd).
 *
 * Memory: a caching pool per device. Freed blocks are kept for the next allocation of the same rounded
 * size instead of cuMemFree (which waits for the whole device); the pool is emptied when no PlusEP EP
 * of the device is left, or when an allocation fails (after a synchronisation). Reusing a block is safe
 * because the device's PlusEP work is in one stream order (PlusEP's stream, or the one stream ORT hands
 * a session). While a graph is captured, the blocks freed belong to the captured graph until it is
 * released (a replay writes them).
 *
 * The launcher's driver table (driver.h) covers what kernels need; the extra entry points used here are
 * resolved from the same library ($PLUS_EP_CUDA_LIBRARY or libcuda.so.1) and are optional: without the
 * async copies, streams or graphs we copy synchronously, use the legacy stream and never capture (the
 * tests' stand-in driver has none of them). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ep.h"
#include "ort_tensor.h"

struct plus_cuda_extra {
    CUresult (*cuMemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);                 /* cuMemcpyDtoD_v2 */
    CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);  /* cuMemcpyHtoDAsync_v2 */
    CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);        /* cuMemcpyDtoHAsync_v2 */
    CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);  /* cuMemcpyDtoDAsync_v2 */
    CUresult (*cuStreamSynchronize)(CUstream);
    CUresult (*cuMemAllocAsync)(CUdeviceptr*, size_t, CUstream);
    CUresult (*cuMemFreeAsync)(CUdeviceptr, CUstream);
    CUresult (*cuDeviceGetPCIBusId)(char*, int, CUdevice);
    CUresult (*cuStreamCreate)(CUstream*, unsigned);
    CUresult (*cuStreamDestroy)(CUstream);                                        /* cuStreamDestroy_v2 */
    plus_graph_api graph;
    plus_event_api event;
};

static struct plus_cuda_extra g_extra;
static pthread_once_t g_extra_once = PTHREAD_ONCE_INIT;

static void load_extra(void) {
    const char* path = getenv("PLUS_EP_CUDA_LIBRARY");
    if (!path || !*path) path = "libcuda.so.1";
    void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);   /* the launcher's handle, one more reference */
    if (!h) return;
    *(void**)&g_extra.cuMemcpyDtoD = dlsym(h, "cuMemcpyDtoD_v2");
    *(void**)&g_extra.cuMemcpyHtoDAsync = dlsym(h, "cuMemcpyHtoDAsync_v2");
    *(void**)&g_extra.cuMemcpyDtoHAsync = dlsym(h, "cuMemcpyDtoHAsync_v2");
    *(void**)&g_extra.cuMemcpyDtoDAsync = dlsym(h, "cuMemcpyDtoDAsync_v2");
    *(void**)&g_extra.cuStreamSynchronize = dlsym(h, "cuStreamSynchronize");
    *(void**)&g_extra.cuMemAllocAsync = dlsym(h, "cuMemAllocAsync");
    *(void**)&g_extra.cuMemFreeAsync = dlsym(h, "cuMemFreeAsync");
    *(void**)&g_extra.cuDeviceGetPCIBusId = dlsym(h, "cuDeviceGetPCIBusId");
    *(void**)&g_extra.cuStreamCreate = dlsym(h, "cuStreamCreate");
    *(void**)&g_extra.cuStreamDestroy = dlsym(h, "cuStreamDestroy_v2");
    plus_graph_api* g = &g_extra.graph;
    *(void**)&g->cuStreamBeginCapture = dlsym(h, "cuStreamBeginCapture_v2");
    *(void**)&g->cuStreamEndCapture = dlsym(h, "cuStreamEndCapture");
    *(void**)&g->cuGraphInstantiate = dlsym(h, "cuGraphInstantiateWithFlags");
    *(void**)&g->cuGraphLaunch = dlsym(h, "cuGraphLaunch");
    *(void**)&g->cuGraphExecDestroy = dlsym(h, "cuGraphExecDestroy");
    *(void**)&g->cuGraphDestroy = dlsym(h, "cuGraphDestroy");
    plus_event_api* e = &g_extra.event;
    *(void**)&e->cuEventCreate = dlsym(h, "cuEventCreate");
    *(void**)&e->cuEventRecord = dlsym(h, "cuEventRecord");
    *(void**)&e->cuEventSynchronize = dlsym(h, "cuEventSynchronize");
    *(void**)&e->cuEventElapsedTime = dlsym(h, "cuEventElapsedTime_v2");
    if (!e->cuEventElapsedTime) *(void**)&e->cuEventElapsedTime = dlsym(h, "cuEventElapsedTime");
    *(void**)&e->cuEventDestroy = dlsym(h, "cuEventDestroy_v2");
    e->ok = e->cuEventCreate && e->cuEventRecord && e->cuEventSynchronize && e->cuEventElapsedTime && e->cuEventDestroy;
    if (!g_extra.cuStreamSynchronize) g_extra.cuMemAllocAsync = NULL, g_extra.cuStreamCreate = NULL;
    if (!g_extra.cuMemAllocAsync || !g_extra.cuMemFreeAsync) g_extra.cuMemAllocAsync = NULL, g_extra.cuMemFreeAsync = NULL;
    if (!g_extra.cuStreamCreate || !g_extra.cuStreamDestroy) g_extra.cuStreamCreate = NULL;
    g->ok = g_extra.cuStreamCreate && g->cuStreamBeginCapture && g->cuStreamEndCapture && g->cuGraphInstantiate &&
            g->cuGraphLaunch && g->cuGraphExecDestroy && g->cuGraphDestroy;
}

const plus_cuda_extra* plus_cuda_extra_get(void) {
    pthread_once(&g_extra_once, load_extra);
    return &g_extra;
}

const plus_graph_api* plus_ep_graph_api(void) { return &plus_cuda_extra_get()->graph; }
const plus_event_api* plus_ep_event_api(void) { return &plus_cuda_extra_get()->event; }

void plus_ep_pci_bus_id(const plus_driver* d, int ordinal, char* buf, size_t n) {
    const plus_cuda_extra* x = plus_cuda_extra_get();
    CUdevice dev;
    buf[0] = 0;
    if (!d || !x->cuDeviceGetPCIBusId || d->cuDeviceGet(&dev, ordinal)) return;
    char id[64] = "";
    if (x->cuDeviceGetPCIBusId(id, (int)sizeof id, dev)) return;
    snprintf(buf, n, "%s", id);
    for (char* p = buf; *p; p++)
        if (*p >= 'A' && *p <= 'Z') *p = (char)(*p - 'A' + 'a');
}

static int cu_err(const plus_driver* d, CUresult r, const char* what, char* err, size_t errlen) {
    char e[128];
    plus_cu_error(d, r, e, sizeof e);
    snprintf(err, errlen, "PlusEP: %s failed: %s", what, e);
    return -1;
}

/* ---- per device: the primary context (the CUDA runtime's, so pointers and streams are shared with the
 * CUDA EP), PlusEP's stream and the memory pool ---- */

typedef struct { CUdeviceptr p; size_t size; } block;
typedef struct { block* v; size_t n, cap; } block_list;

typedef struct {
    CUcontext ctx;
    CUstream stream;           /* PlusEP's own (blocking) stream; NULL until first needed or without streams */
    int stream_made;
    block_list live, cached;   /* handed out / kept for reuse */
    void* capture_owner;       /* non-NULL while a graph is captured: freed blocks go to it */
    block_list captured;
    int eps;                   /* live GPU-mode PlusEP EPs of this device */
    size_t peak_bytes, live_bytes, cached_bytes;
} device_state;

static pthread_mutex_t g_dev_lock = PTHREAD_MUTEX_INITIALIZER;   /* every field of g_dev */
static device_state g_dev[PLUS_EP_MAX_DEVICES];

static int list_push(block_list* l, block b) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        block* v = realloc(l->v, cap * sizeof *v);
        if (!v) return -1;
        l->v = v, l->cap = cap;
    }
    l->v[l->n++] = b;
    return 0;
}
static block list_take(block_list* l, size_t i) {
    block b = l->v[i];
    l->v[i] = l->v[--l->n];
    return b;
}

CUcontext plus_ep_primary_ctx(const plus_driver* d, int ordinal, char* err, size_t errlen) {
    if (!d || ordinal < 0 || ordinal >= PLUS_EP_MAX_DEVICES || ordinal >= d->device_count) {
        snprintf(err, errlen, "PlusEP: no CUDA device %d", ordinal);
        return NULL;
    }
    pthread_mutex_lock(&g_dev_lock);
    CUcontext c = g_dev[ordinal].ctx;
    if (!c) {
        CUdevice dev;
        CUresult r = d->cuDeviceGet(&dev, ordinal);
        if (!r) r = d->cuDevicePrimaryCtxRetain(&c, dev);   /* kept for the process's lifetime */
        if (r) {
            char e[128];
            plus_cu_error(d, r, e, sizeof e);
            snprintf(err, errlen, "PlusEP: retaining the primary context of CUDA device %d failed: %s", ordinal, e);
            c = NULL;
        }
        g_dev[ordinal].ctx = c;
    }
    pthread_mutex_unlock(&g_dev_lock);
    return c;
}

CUstream plus_ep_device_stream(const plus_driver* d, int ordinal, char* err, size_t errlen) {
    const plus_cuda_extra* x = plus_cuda_extra_get();
    CUcontext ctx = plus_ep_primary_ctx(d, ordinal, err, errlen);
    if (!ctx || !x->cuStreamCreate) return NULL;
    pthread_mutex_lock(&g_dev_lock);
    device_state* ds = &g_dev[ordinal];
    if (!ds->stream_made && !d->cuCtxPushCurrent(ctx)) {
        CUstream s = NULL;
        if (!x->cuStreamCreate(&s, 0 /* CU_STREAM_DEFAULT: ordered with the legacy stream */)) ds->stream = s;
        ds->stream_made = 1;
        CUcontext popped;
        d->cuCtxPopCurrent(&popped);
    }
    CUstream s = ds->stream;
    pthread_mutex_unlock(&g_dev_lock);
    return s;
}

#define POOL_ROUND 512
static size_t rounded(size_t bytes) { return ((bytes ? bytes : 1) + POOL_ROUND - 1) / POOL_ROUND * POOL_ROUND; }

/* Free the cached blocks of a device (its context current; after a synchronisation). */
static void drop_cached(const plus_driver* d, device_state* ds) {
    for (size_t i = 0; i < ds->cached.n; i++) d->cuMemFree(ds->cached.v[i].p);
    ds->cached.n = 0;
    ds->cached_bytes = 0;
}

/* A block of at least `bytes` of device memory from the pool of `ordinal` (its context must be current). */
static CUresult pool_alloc(const plus_driver* d, int ordinal, size_t bytes, CUdeviceptr* out) {
    size_t want = rounded(bytes);
    pthread_mutex_lock(&g_dev_lock);
    device_state* ds = &g_dev[ordinal];
    CUresult r = 0;
    block b = {0, 0};
    for (size_t i = 0; i < ds->cached.n; i++)
        if (ds->cached.v[i].size == want) {
            b = list_take(&ds->cached, i);
            ds->cached_bytes -= want;
            break;
        }
    if (!b.p) {
        r = d->cuMemAlloc(&b.p, want);
        if (r == 2 /* CUDA_ERROR_OUT_OF_MEMORY */ && ds->cached.n && !d->cuCtxSynchronize()) {
            drop_cached(d, ds);
            r = d->cuMemAlloc(&b.p, want);
        }
        b.size = want;
    }
    if (!r && list_push(&ds->live, b)) {
        d->cuMemFree(b.p);
        r = 2;
    }
    if (!r) {
        ds->live_bytes += want;
        if (ds->live_bytes > ds->peak_bytes) ds->peak_bytes = ds->live_bytes;
        *out = b.p;
    }
    pthread_mutex_unlock(&g_dev_lock);
    return r;
}

/* Back to the pool (or to the graph being captured); with no PlusEP EP of the device left (an OrtValue
 * the user kept longer than the session), back to the driver. 0, or -1 when p is not a live block. */
static int pool_free(int ordinal, CUdeviceptr p) {
    const plus_driver* d = plus_driver_get(NULL);
    pthread_mutex_lock(&g_dev_lock);
    device_state* ds = &g_dev[ordinal];
    int rc = -1;
    for (size_t i = 0; i < ds->live.n; i++)
        if (ds->live.v[i].p == p) {
            block b = list_take(&ds->live, i);
            ds->live_bytes -= b.size;
            if (ds->capture_owner) rc = list_push(&ds->captured, b);
            else if (ds->eps > 0 || !d || !ds->ctx || d->cuCtxPushCurrent(ds->ctx)) {
                if (!(rc = list_push(&ds->cached, b))) ds->cached_bytes += b.size;
            } else {
                rc = d->cuMemFree(b.p) ? -1 : 0;
                CUcontext popped;
                d->cuCtxPopCurrent(&popped);
            }
            break;
        }
    pthread_mutex_unlock(&g_dev_lock);
    return rc;
}

void plus_ep_pool_capture(int ordinal, void* owner) {
    pthread_mutex_lock(&g_dev_lock);
    g_dev[ordinal].capture_owner = owner;
    pthread_mutex_unlock(&g_dev_lock);
}

/* The blocks a captured graph keeps: moved out of the pool into *kept (caller frees with
 * plus_ep_pool_release_kept once the graph is gone). */
void plus_ep_pool_take_captured(int ordinal, plus_ep_blocks* kept) {
    pthread_mutex_lock(&g_dev_lock);
    device_state* ds = &g_dev[ordinal];
    kept->p = malloc((ds->captured.n ? ds->captured.n : 1) * sizeof *kept->p);
    kept->size = malloc((ds->captured.n ? ds->captured.n : 1) * sizeof *kept->size);
    kept->n = 0;
    for (size_t i = 0; kept->p && kept->size && i < ds->captured.n; i++)
        kept->p[kept->n] = ds->captured.v[i].p, kept->size[kept->n++] = ds->captured.v[i].size;
    if (!kept->p || !kept->size)   /* no room to remember them: back to the pool */
        for (size_t i = 0; i < ds->captured.n; i++) list_push(&ds->cached, ds->captured.v[i]);
    ds->captured.n = 0;
    pthread_mutex_unlock(&g_dev_lock);
}

void plus_ep_pool_release_kept(int ordinal, plus_ep_blocks* kept) {
    pthread_mutex_lock(&g_dev_lock);
    device_state* ds = &g_dev[ordinal];
    for (size_t i = 0; i < kept->n; i++)
        if (!list_push(&ds->cached, (block){kept->p[i], kept->size[i]})) ds->cached_bytes += kept->size[i];
    pthread_mutex_unlock(&g_dev_lock);
    free(kept->p), free(kept->size);
    memset(kept, 0, sizeof *kept);
}

void plus_ep_device_ref(int ordinal, int delta) {
    const plus_driver* d = plus_driver_get(NULL);
    pthread_mutex_lock(&g_dev_lock);
    device_state* ds = &g_dev[ordinal];
    ds->eps += delta;
    if (ds->eps == 0 && d && ds->ctx && !d->cuCtxPushCurrent(ds->ctx)) {   /* the last EP: empty the pool */
        if (!d->cuCtxSynchronize()) drop_cached(d, ds);
        CUcontext popped;
        d->cuCtxPopCurrent(&popped);
    }
    block_list* lists[] = {&ds->live, &ds->cached, &ds->captured};
    for (size_t i = 0; i < 3 && ds->eps == 0; i++)
        if (!lists[i]->n) free(lists[i]->v), memset(lists[i], 0, sizeof *lists[i]);
    pthread_mutex_unlock(&g_dev_lock);
}

/* PlusEP_MemoryStats(ordinal, out[4]): live blocks, live bytes, cached bytes, peak live bytes (tests). */
__attribute__((visibility("default"))) void PlusEP_MemoryStats(int ordinal, long long* out) {
    memset(out, 0, 4 * sizeof *out);
    if (ordinal < 0 || ordinal >= PLUS_EP_MAX_DEVICES) return;
    pthread_mutex_lock(&g_dev_lock);
    device_state* ds = &g_dev[ordinal];
    out[0] = (long long)ds->live.n, out[1] = (long long)ds->live_bytes, out[2] = (long long)ds->cached_bytes;
    out[3] = (long long)ds->peak_bytes;
    pthread_mutex_unlock(&g_dev_lock);
}

/* Temporary launch memory (outputs nobody reads, scratch). On PlusEP's own stream (or none) from the
 * pool: the block is reused only by later work in the same stream order. On a stream ORT handed us
 * (another EP's), stream ordered with cuMemAllocAsync when the driver has it. */
int plus_ep_temp_alloc(const plus_driver* d, int ordinal, CUcontext ctx, CUstream stream, int foreign, size_t bytes,
                       CUdeviceptr* out, char* err, size_t errlen) {
    const plus_cuda_extra* x = plus_cuda_extra_get();
    CUresult r = d->cuCtxPushCurrent(ctx);
    if (r) return cu_err(d, r, "cuCtxPushCurrent", err, errlen);
    r = foreign && stream && x->cuMemAllocAsync ? x->cuMemAllocAsync(out, bytes ? bytes : 1, stream)
                                                : pool_alloc(d, ordinal, bytes, out);
    CUcontext popped;
    d->cuCtxPopCurrent(&popped);
    return r ? cu_err(d, r, "allocating launch memory", err, errlen) : 0;
}

void plus_ep_temp_free(const plus_driver* d, int ordinal, CUcontext ctx, CUstream stream, int foreign, CUdeviceptr p) {
    const plus_cuda_extra* x = plus_cuda_extra_get();
    if (!p) return;
    if (!(foreign && stream && x->cuMemAllocAsync)) {
        pool_free(ordinal, p);
        return;
    }
    if (d->cuCtxPushCurrent(ctx)) return;
    x->cuMemFreeAsync(p, stream);   /* ordered after the launches queued on the stream */
    CUcontext popped;
    d->cuCtxPopCurrent(&popped);
}

/* ---- the allocator (device memory of one CUDA ordinal, from the pool) ---- */

typedef struct {
    plus_ort_allocator base;
    OrtMemoryInfo* info;
    int ordinal;
} plus_allocator;

static void* a_alloc(OrtAllocator* base, size_t bytes) {
    plus_allocator* a = (plus_allocator*)base;
    char err[PLUS_ERR_LEN];
    const plus_driver* d = plus_driver_get(NULL);
    CUcontext ctx = plus_ep_primary_ctx(d, a->ordinal, err, sizeof err);
    CUdeviceptr p = 0;
    if (!ctx || !bytes || d->cuCtxPushCurrent(ctx)) return NULL;
    CUresult r = pool_alloc(d, a->ordinal, bytes, &p);
    CUcontext popped;
    d->cuCtxPopCurrent(&popped);
    return r ? NULL : (void*)(uintptr_t)p;
}

static void a_free(OrtAllocator* base, void* p) {
    plus_allocator* a = (plus_allocator*)base;
    if (p) pool_free(a->ordinal, (CUdeviceptr)(uintptr_t)p);
}

static const OrtMemoryInfo* a_info(const OrtAllocator* base) { return ((const plus_allocator*)base)->info; }

OrtStatus* plus_ep_create_allocator(const OrtMemoryInfo* info, OrtAllocator** out) {
    *out = NULL;
    const OrtMemoryDevice* md = EP_CALL(plus_ep_epapi, MemoryInfo_GetMemoryDevice)(info);
    if (!md || EP_CALL(plus_ep_epapi, MemoryDevice_GetDeviceType)(md) != ORT_MEMDEV_GPU ||
        EP_CALL(plus_ep_epapi, MemoryDevice_GetMemoryType)(md) != ORT_DEVMEM_DEFAULT)
        return plus_ep_status(ORT_NOT_IMPLEMENTED, "PlusEP: no allocator for that memory (only CUDA device memory)");
    int ordinal = (int)EP_CALL(plus_ep_epapi, MemoryDevice_GetDeviceId)(md);
    char err[PLUS_ERR_LEN];
    const char* why = NULL;
    const plus_driver* d = plus_driver_get(&why);
    if (!d) return plus_ep_status(ORT_EP_FAIL, "PlusEP allocator: %s", why);
    if (!plus_ep_primary_ctx(d, ordinal, err, sizeof err)) return plus_ep_status(ORT_EP_FAIL, "%s", err);
    plus_allocator* a = calloc(1, sizeof *a);
    if (!a) return plus_ep_status(ORT_FAIL, "PlusEP: out of memory");
    OrtStatus* st = ORT_CALL(plus_ep_api, CreateMemoryInfo_V2)("Cuda", ORT_MEMDEV_GPU, PLUS_NVIDIA_VENDOR_ID, ordinal,
                                                              ORT_DEVMEM_DEFAULT, 0, ORT_DEVICE_ALLOCATOR, &a->info);
    if (st) {
        free(a);
        return st;
    }
    a->base.version = plus_ep_version;
    a->base.Alloc = a_alloc;
    a->base.Free = a_free;
    a->base.Info = a_info;
    a->base.Reserve = a_alloc;
    a->ordinal = ordinal;
    *out = (OrtAllocator*)&a->base;
    return NULL;
}

void plus_ep_release_allocator(OrtAllocator* base) {
    plus_allocator* a = (plus_allocator*)base;
    if (!a) return;
    if (a->info) ORT_CALL(plus_ep_api, ReleaseMemoryInfo)(a->info);
    free(a);
}

/* ---- copies ---- */

int plus_ep_on_gpu(const OrtMemoryDevice* md) {   /* NVIDIA device memory (not host-accessible) */
    return md && EP_CALL(plus_ep_epapi, MemoryDevice_GetDeviceType)(md) == ORT_MEMDEV_GPU &&
           EP_CALL(plus_ep_epapi, MemoryDevice_GetVendorId)(md) == PLUS_NVIDIA_VENDOR_ID &&
           EP_CALL(plus_ep_epapi, MemoryDevice_GetMemoryType)(md) == ORT_DEVMEM_DEFAULT;
}

static int on_host(const OrtMemoryDevice* md) {
    if (!md) return 0;
    int t = EP_CALL(plus_ep_epapi, MemoryDevice_GetDeviceType)(md);
    return t == ORT_MEMDEV_CPU ||
           (t == ORT_MEMDEV_GPU && EP_CALL(plus_ep_epapi, MemoryDevice_GetMemoryType)(md) == ORT_DEVMEM_HOST_ACCESSIBLE);
}

static bool x_can_copy(const OrtDataTransferImpl* x, const OrtMemoryDevice* src, const OrtMemoryDevice* dst) {
    (void)x;
    return (plus_ep_on_gpu(src) && (plus_ep_on_gpu(dst) || on_host(dst))) || (on_host(src) && plus_ep_on_gpu(dst));
}

CUresult plus_ep_htod(const plus_driver* d, CUcontext ctx, CUdeviceptr dst, const void* src, size_t bytes,
                      CUstream stream) {
    const plus_cuda_extra* x = plus_cuda_extra_get();
    CUresult r = d->cuCtxPushCurrent(ctx);
    if (r) return r;
    r = stream && x->cuMemcpyHtoDAsync ? x->cuMemcpyHtoDAsync(dst, src, bytes, stream) : d->cuMemcpyHtoD(dst, src, bytes);
    CUcontext popped;
    d->cuCtxPopCurrent(&popped);
    return r;
}

/* Copy one tensor between the memories its OrtValues say. stream: where the copy is ordered (NULL: the
 * legacy stream, synchronous). A copy into host memory has landed when this returns. */
OrtStatus* plus_ep_copy_value(const plus_driver* d, const OrtValue* src, OrtValue* dst, CUstream stream) {
    const plus_cuda_extra* x = plus_cuda_extra_get();
    const OrtApi* api = plus_ep_api;
    const OrtMemoryDevice* sm = EP_CALL(plus_ep_epapi, Value_GetMemoryDevice)(src);
    const OrtMemoryDevice* dm = EP_CALL(plus_ep_epapi, Value_GetMemoryDevice)((const OrtValue*)dst);
    size_t bytes = 0;
    const void* sp = NULL;
    void* dp = NULL;
    OrtStatus* st = ORT_CALL(api, GetTensorSizeInBytes)(src, &bytes);
    if (!st) st = ORT_CALL(api, GetTensorData)(src, &sp);
    if (!st) st = ORT_CALL(api, GetTensorMutableData)(dst, &dp);
    if (st || !bytes) return st;
    int s_gpu = plus_ep_on_gpu(sm), d_gpu = plus_ep_on_gpu(dm);
    if (!s_gpu && !d_gpu) {
        memcpy(dp, sp, bytes);
        return NULL;
    }
    int ordinal = (int)EP_CALL(plus_ep_epapi, MemoryDevice_GetDeviceId)(d_gpu ? dm : sm);
    char err[PLUS_ERR_LEN];
    CUcontext ctx = plus_ep_primary_ctx(d, ordinal, err, sizeof err);
    if (!ctx) return plus_ep_status(ORT_EP_FAIL, "%s", err);
    CUresult r = d->cuCtxPushCurrent(ctx);
    if (r) return cu_err(d, r, "cuCtxPushCurrent", err, sizeof err), plus_ep_status(ORT_EP_FAIL, "%s", err);
    CUdeviceptr s = (CUdeviceptr)(uintptr_t)sp, t = (CUdeviceptr)(uintptr_t)dp;
    const char* what = "cuMemcpy";
    if (s_gpu && d_gpu) {
        what = "cuMemcpyDtoD";
        if (stream && x->cuMemcpyDtoDAsync) r = x->cuMemcpyDtoDAsync(t, s, bytes, stream);
        else if (x->cuMemcpyDtoD) r = x->cuMemcpyDtoD(t, s, bytes);
        else {   /* a driver without device-to-device copies: through the host */
            void* tmp = malloc(bytes);
            if (stream) r = x->cuStreamSynchronize ? x->cuStreamSynchronize(stream) : d->cuCtxSynchronize();
            if (!r) r = tmp ? d->cuMemcpyDtoH(tmp, s, bytes) : 2 /* CUDA_ERROR_OUT_OF_MEMORY */;
            if (!r) r = d->cuMemcpyHtoD(t, tmp, bytes);
            free(tmp);
        }
    } else if (d_gpu) {
        what = "cuMemcpyHtoD";
        r = stream && x->cuMemcpyHtoDAsync ? x->cuMemcpyHtoDAsync(t, sp, bytes, stream) : d->cuMemcpyHtoD(t, sp, bytes);
    } else {
        /* Into host memory: the host reads it next, so the copy must have landed when we return. */
        what = "cuMemcpyDtoH";
        if (stream && x->cuMemcpyDtoHAsync) {
            r = x->cuMemcpyDtoHAsync(dp, s, bytes, stream);
            if (!r) r = x->cuStreamSynchronize ? x->cuStreamSynchronize(stream) : d->cuCtxSynchronize();
        } else {
            if (stream) r = x->cuStreamSynchronize ? x->cuStreamSynchronize(stream) : d->cuCtxSynchronize();
            if (!r) r = d->cuMemcpyDtoH(dp, s, bytes);
        }
    }
    CUcontext popped;
    d->cuCtxPopCurrent(&popped);
    if (r) {
        cu_err(d, r, what, err, sizeof err);
        return plus_ep_status(ORT_EP_FAIL, "%s (%zu bytes)", err, bytes);
    }
    return NULL;
}

/* The data transfer ORT uses for graph inputs and outputs (not stream aware: no streams, so synchronous
 * copies on the legacy stream, which the driver orders after PlusEP's blocking stream). */
static OrtStatus* x_copy(OrtDataTransferImpl* self, const OrtValue** src, OrtValue** dst, OrtSyncStream** streams,
                         size_t n) {
    (void)self;
    const char* why = NULL;
    const plus_driver* d = plus_driver_get(&why);
    if (!d) return plus_ep_status(ORT_EP_FAIL, "PlusEP data transfer: %s", why);
    for (size_t i = 0; i < n; i++) {
        CUstream s = streams && streams[i] ? (CUstream)ORT_CALL(plus_ep_api, SyncStream_GetHandle)(streams[i]) : NULL;
        OrtStatus* st = plus_ep_copy_value(d, src[i], dst[i], s);
        if (st) return st;
    }
    return NULL;
}

static void x_release(OrtDataTransferImpl* self) { free(self); }

OrtStatus* plus_ep_create_data_transfer(OrtDataTransferImpl** out) {
    OrtDataTransferImpl* x = calloc(1, sizeof *x);
    if (!x) return plus_ep_status(ORT_FAIL, "PlusEP: out of memory");
    x->ort_version_supported = plus_ep_version;
    x->Release = x_release;
    x->CanCopy = x_can_copy;
    x->CopyTensors = x_copy;
    *out = x;
    return NULL;
}

/* ---- PlusEP's MemcpyFromHost / MemcpyToHost kernels (the kernel registry) ---- */

typedef struct {
    OrtKernelImpl base;   /* first */
    plus_ep* ep;
    int to_host;
} memcpy_kernel;

static OrtStatus* mk_compute(OrtKernelImpl* self, OrtKernelContext* kctx) {
    memcpy_kernel* k = (memcpy_kernel*)self;
    const OrtApi* api = plus_ep_api;
    const char* name = k->to_host ? "MemcpyToHost" : "MemcpyFromHost";
    const OrtValue* x = NULL;
    OrtValue* y = NULL;
    int dtype = 0, rank = 0, too_deep = 0;
    int64_t dims[PLUS_MAX_RANK];
    long long elems = 0;
    void* data = NULL;
    OrtStatus* st = ORT_CALL(api, KernelContext_GetInput)(kctx, 0, &x);
    if (!st && x) st = plus_ort_describe(api, x, &dtype, &rank, dims, &elems, &data, &too_deep);
    if (st || !x) return st ? st : plus_ep_status(ORT_FAIL, "PlusEP %s: no input", name);
    if (too_deep) return plus_ep_status(ORT_INVALID_ARGUMENT, "PlusEP %s: rank above %d", name, PLUS_MAX_RANK);
    if ((st = ORT_CALL(api, KernelContext_GetOutput)(kctx, 0, dims, (size_t)rank, &y))) return st;
    void* stream = NULL;
    if ((st = ORT_CALL(api, KernelContext_GetGPUComputeStream)(kctx, &stream))) plus_ep_drop(st), stream = NULL;
    char err[PLUS_ERR_LEN];
    if (!stream) stream = plus_ep_device_stream(k->ep->drv, k->ep->ordinal, err, sizeof err);
    return plus_ep_copy_value(k->ep->drv, x, y, (CUstream)stream);
}

static void mk_release(OrtKernelImpl* self) { free(self); }

static OrtStatus* mk_create(void* state, const OrtKernelInfo* info, OrtKernelImpl** out, int to_host) {
    (void)info;
    memcpy_kernel* k = calloc(1, sizeof *k);
    if (!k) return plus_ep_status(ORT_FAIL, "PlusEP: out of memory");
    k->base.ort_version_supported = plus_ep_version;
    k->base.Compute = mk_compute;
    k->base.Release = mk_release;
    k->ep = state;
    k->to_host = to_host;
    *out = &k->base;
    return NULL;
}
static OrtStatus* mk_create_from_host(void* s, const OrtKernelInfo* i, OrtKernelImpl** o) { return mk_create(s, i, o, 0); }
static OrtStatus* mk_create_to_host(void* s, const OrtKernelInfo* i, OrtKernelImpl** o) { return mk_create(s, i, o, 1); }

/* ONNX tensor element types a Memcpy can move (fixed-size ones: float .. bfloat16, no strings). */
static const int MEMCPY_TYPES[] = {1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 16};

OrtStatus* plus_ep_kernel_registry(plus_ep* ep, OrtKernelRegistry** out) {
    const OrtEpApi* e = plus_ep_epapi;
    *out = NULL;
    const OrtDataType* types[sizeof MEMCPY_TYPES / sizeof *MEMCPY_TYPES];
    OrtStatus* st = NULL;
    for (size_t i = 0; i < sizeof types / sizeof *types && !st; i++)
        st = EP_CALL(e, GetTensorDataType)(MEMCPY_TYPES[i], &types[i]);
    OrtKernelRegistry* reg = NULL;
    if (!st) st = EP_CALL(e, CreateKernelRegistry)(&reg);
    for (int to_host = 0; to_host < 2 && !st; to_host++) {
        OrtKernelDefBuilder* b = NULL;
        OrtKernelDef* def = NULL;
        if (!(st = EP_CALL(e, CreateKernelDefBuilder)(&b)) &&
            !(st = EP_CALL(e, KernelDefBuilder_SetOperatorType)(b, to_host ? "MemcpyToHost" : "MemcpyFromHost")) &&
            !(st = EP_CALL(e, KernelDefBuilder_SetDomain)(b, "")) &&
            !(st = EP_CALL(e, KernelDefBuilder_SetSinceVersion)(b, 1, 1)) &&
            !(st = EP_CALL(e, KernelDefBuilder_SetExecutionProvider)(b, PLUS_EP_NAME)) &&
            !(st = to_host ? EP_CALL(e, KernelDefBuilder_SetOutputMemType)(b, 0, ORT_MEM_CPU_OUTPUT)
                           : EP_CALL(e, KernelDefBuilder_SetInputMemType)(b, 0, ORT_MEM_CPU_INPUT)) &&
            !(st = EP_CALL(e, KernelDefBuilder_AddTypeConstraint)(b, "T", types, sizeof types / sizeof *types)) &&
            !(st = EP_CALL(e, KernelDefBuilder_Build)(b, &def)))
            st = EP_CALL(e, KernelRegistry_AddKernel)(reg, def, to_host ? mk_create_to_host : mk_create_from_host, ep);
        if (def) EP_CALL(e, ReleaseKernelDef)(def);
        if (b) EP_CALL(e, ReleaseKernelDefBuilder)(b);
    }
    if (st) {
        if (reg) EP_CALL(e, ReleaseKernelRegistry)(reg);
        return st;
    }
    *out = reg;
    return NULL;
}
