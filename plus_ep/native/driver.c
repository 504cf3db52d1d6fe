/* dlopen the CUDA driver once per process and resolve the entry points the launcher uses. */
#define _POSIX_C_SOURCE 200809L
#include "driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static plus_driver g_drv;
static const plus_driver* g_ok;
static char g_why[512] = "not loaded";
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void load(void) {
    const char* path = getenv("PLUS_EP_CUDA_LIBRARY");
    if (!path || !*path) path = "libcuda.so.1";
    void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char* e = dlerror();
        snprintf(g_why, sizeof g_why, "cannot load the CUDA driver %s: %s", path, e ? e : "?");
        return;
    }
    struct { void** slot; const char* name; } syms[] = {
#define SYM(field, name) {(void**)&g_drv.field, name}
        SYM(cuInit, "cuInit"), SYM(cuGetErrorName, "cuGetErrorName"), SYM(cuDeviceGetCount, "cuDeviceGetCount"),
        SYM(cuDeviceGet, "cuDeviceGet"), SYM(cuDeviceGetAttribute, "cuDeviceGetAttribute"),
        SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"), SYM(cuCtxGetCurrent, "cuCtxGetCurrent"),
        SYM(cuCtxGetDevice, "cuCtxGetDevice"), SYM(cuCtxPushCurrent, "cuCtxPushCurrent_v2"),
        SYM(cuCtxPopCurrent, "cuCtxPopCurrent_v2"), SYM(cuCtxSynchronize, "cuCtxSynchronize"),
        SYM(cuStreamGetCtx, "cuStreamGetCtx"),
        SYM(cuStreamSynchronize, "cuStreamSynchronize"), SYM(cuModuleLoadData, "cuModuleLoadData"),
        SYM(cuModuleGetFunction, "cuModuleGetFunction"), SYM(cuModuleUnload, "cuModuleUnload"),
        SYM(cuFuncSetAttribute, "cuFuncSetAttribute"), SYM(cuLaunchKernel, "cuLaunchKernel"),
        SYM(cuMemAlloc, "cuMemAlloc_v2"), SYM(cuMemFree, "cuMemFree_v2"), SYM(cuMemcpyHtoD, "cuMemcpyHtoD_v2"),
        SYM(cuMemcpyDtoH, "cuMemcpyDtoH_v2"),
#undef SYM
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        *syms[i].slot = dlsym(h, syms[i].name);
        if (!*syms[i].slot) {
            snprintf(g_why, sizeof g_why, "the CUDA driver %s lacks %s", path, syms[i].name);
            return;   /* keep the handle: nothing else to release safely */
        }
    }
    g_drv.cuTensorMapEncodeTiled = dlsym(h, "cuTensorMapEncodeTiled");   /* optional: kernels with tensor maps */
    CUresult r = g_drv.cuInit(0);
    if (r) {
        snprintf(g_why, sizeof g_why, "cuInit failed with CUDA error %d (no usable GPU?)", r);
        return;
    }
    if (g_drv.cuDeviceGetCount(&g_drv.device_count) || g_drv.device_count <= 0) {
        snprintf(g_why, sizeof g_why, "the CUDA driver reports no device");
        return;
    }
    g_ok = &g_drv;
}

const plus_driver* plus_driver_get(const char** why) {
    pthread_once(&g_once, load);
    if (!g_ok && why) *why = g_why;
    return g_ok;
}

void plus_cu_error(const plus_driver* d, CUresult r, char* buf, size_t n) {
    const char* name = NULL;
    if (d && d->cuGetErrorName(r, &name)) name = NULL;
    snprintf(buf, n, "%s (%d)", name ? name : "CUDA error", r);
}
