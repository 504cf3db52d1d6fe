/* PlusEP's device memory on the CUDA driver API: the allocator ORT asks the factory for (one per GPU
 * EP device), the data transfer (host <-> device, device <-> device) and temporary launch memory.
 *
 * The launcher's driver table (driver.h) covers what kernels need; the few extra entry points used
 * here are resolved from the same library ($PLUS_EP_CUDA_LIBRARY or libcuda.so.1) and are optional:
 * without the async copies or the stream-ordered allocator we copy / allocate synchronously (the
 * tests' stand-in driver has neither). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ep.h"

struct plus_cuda_extra {
    CUresult (*cuMemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);                 /* cuMemcpyDtoD_v2 */
    CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);  /* cuMemcpyHtoDAsync_v2 */
    CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);        /* cuMemcpyDtoHAsync_v2 */
    CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);  /* cuMemcpyDtoDAsync_v2 */
    CUresult (*cuStreamSynchronize)(CUstream);
    CUresult (*cuMemAllocAsync)(CUdeviceptr*, size_t, CUstream);
    CUresult (*cuMemFreeAsync)(CUdeviceptr, CUstream);
    CUresult (*cuDeviceGetPCIBusId)(char*, int, CUdevice);
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
    if (!g_extra.cuStreamSynchronize) g_extra.cuMemAllocAsync = NULL;   /* async pairs need a way to wait */
    if (!g_extra.cuMemAllocAsync || !g_extra.cuMemFreeAsync) g_extra.cuMemAllocAsync = NULL, g_extra.cuMemFreeAsync = NULL;
}

const plus_cuda_extra* plus_cuda_extra_get(void) {
    pthread_once(&g_extra_once, load_extra);
    return &g_extra;
}

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

/* ---- primary contexts (the CUDA runtime's, so pointers and streams are shared with the CUDA EP) ---- */

static pthread_mutex_t g_ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext g_primary[PLUS_EP_MAX_DEVICES];

CUcontext plus_ep_primary_ctx(const plus_driver* d, int ordinal, char* err, size_t errlen) {
    if (!d || ordinal < 0 || ordinal >= PLUS_EP_MAX_DEVICES || ordinal >= d->device_count) {
        snprintf(err, errlen, "PlusEP: no CUDA device %d", ordinal);
        return NULL;
    }
    pthread_mutex_lock(&g_ctx_lock);
    CUcontext c = g_primary[ordinal];
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
        g_primary[ordinal] = c;
    }
    pthread_mutex_unlock(&g_ctx_lock);
    return c;
}

static int cu_err(const plus_driver* d, CUresult r, const char* what, char* err, size_t errlen) {
    char e[128];
    plus_cu_error(d, r, e, sizeof e);
    snprintf(err, errlen, "PlusEP: %s failed: %s", what, e);
    return -1;
}

int plus_ep_temp_alloc(const plus_driver* d, CUcontext ctx, CUstream stream, size_t bytes, CUdeviceptr* out,
                       char* err, size_t errlen) {
    const plus_cuda_extra* x = plus_cuda_extra_get();
    CUresult r = d->cuCtxPushCurrent(ctx);
    if (r) return cu_err(d, r, "cuCtxPushCurrent", err, errlen);
    r = stream && x->cuMemAllocAsync ? x->cuMemAllocAsync(out, bytes ? bytes : 1, stream)
                                     : d->cuMemAlloc(out, bytes ? bytes : 1);
    CUcontext popped;
    d->cuCtxPopCurrent(&popped);
    return r ? cu_err(d, r, "allocating launch memory (cuMemAlloc)", err, errlen) : 0;
}

void plus_ep_temp_free(const plus_driver* d, CUcontext ctx, CUstream stream, CUdeviceptr p) {
    const plus_cuda_extra* x = plus_cuda_extra_get();
    if (!p || d->cuCtxPushCurrent(ctx)) return;
    if (stream && x->cuMemAllocAsync) {
        x->cuMemFreeAsync(p, stream);   /* ordered after the launches queued on the stream */
    } else {
        /* Not stream ordered: wait for the work that uses it first. */
        if (stream && x->cuStreamSynchronize) x->cuStreamSynchronize(stream);
        else if (stream) d->cuCtxSynchronize();
        d->cuMemFree(p);
    }
    CUcontext popped;
    d->cuCtxPopCurrent(&popped);
}

/* ---- the allocator (device memory of one CUDA ordinal) ---- */

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
    CUresult r = d->cuMemAlloc(&p, bytes);
    CUcontext popped;
    d->cuCtxPopCurrent(&popped);
    return r ? NULL : (void*)(uintptr_t)p;
}

static void a_free(OrtAllocator* base, void* p) {
    plus_allocator* a = (plus_allocator*)base;
    char err[PLUS_ERR_LEN];
    const plus_driver* d = plus_driver_get(NULL);
    CUcontext ctx = plus_ep_primary_ctx(d, a->ordinal, err, sizeof err);
    if (!p || !ctx || d->cuCtxPushCurrent(ctx)) return;
    d->cuMemFree((CUdeviceptr)(uintptr_t)p);   /* cuMemFree waits for work still using it */
    CUcontext popped;
    d->cuCtxPopCurrent(&popped);
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

/* ---- data transfer ---- */

static int on_gpu(const OrtMemoryDevice* md) {   /* NVIDIA device memory (not host-accessible) */
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
    return (on_gpu(src) && (on_gpu(dst) || on_host(dst))) || (on_host(src) && on_gpu(dst));
}

static OrtStatus* copy_one(const plus_driver* d, const plus_cuda_extra* x, const OrtValue* src, OrtValue* dst,
                           OrtSyncStream* sync) {
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
    int s_gpu = on_gpu(sm), d_gpu = on_gpu(dm);
    if (!s_gpu && !d_gpu) {
        memcpy(dp, sp, bytes);
        return NULL;
    }
    int ordinal = (int)EP_CALL(plus_ep_epapi, MemoryDevice_GetDeviceId)(d_gpu ? dm : sm);
    char err[PLUS_ERR_LEN];
    CUcontext ctx = plus_ep_primary_ctx(d, ordinal, err, sizeof err);
    if (!ctx) return plus_ep_status(ORT_EP_FAIL, "%s", err);
    CUstream stream = sync ? (CUstream)ORT_CALL(api, SyncStream_GetHandle)(sync) : NULL;
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
            r = tmp ? d->cuMemcpyDtoH(tmp, s, bytes) : 2 /* CUDA_ERROR_OUT_OF_MEMORY */;
            if (!r) r = d->cuMemcpyHtoD(t, tmp, bytes);
            free(tmp);
        }
    } else if (d_gpu) {
        what = "cuMemcpyHtoD";
        r = stream && x->cuMemcpyHtoDAsync ? x->cuMemcpyHtoDAsync(t, sp, bytes, stream) : d->cuMemcpyHtoD(t, sp, bytes);
    } else {
        what = "cuMemcpyDtoH";
        r = stream && x->cuMemcpyDtoHAsync ? x->cuMemcpyDtoHAsync(dp, s, bytes, stream) : d->cuMemcpyDtoH(dp, s, bytes);
    }
    CUcontext popped;
    d->cuCtxPopCurrent(&popped);
    if (r) {
        cu_err(d, r, what, err, sizeof err);
        return plus_ep_status(ORT_EP_FAIL, "%s (%zu bytes)", err, bytes);
    }
    return NULL;
}

static OrtStatus* x_copy(OrtDataTransferImpl* self, const OrtValue** src, OrtValue** dst, OrtSyncStream** streams,
                         size_t n) {
    (void)self;
    const char* why = NULL;
    const plus_driver* d = plus_driver_get(&why);
    if (!d) return plus_ep_status(ORT_EP_FAIL, "PlusEP data transfer: %s", why);
    const plus_cuda_extra* x = plus_cuda_extra_get();
    for (size_t i = 0; i < n; i++) {
        OrtStatus* st = copy_one(d, x, src[i], dst[i], streams ? streams[i] : NULL);
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
