/* The CUDA driver the fuzzers' launcher loads ($PLUS_EP_CUDA_LIBRARY; tests only). Device memory is
 * heap memory of exactly the requested size, so a copy of the wrong length is an AddressSanitizer
 * report; modules "load" by reading the image's first byte (0xEE: an invalid image); entry names
 * starting with "missing" are not found; launches check the launcher's geometry invariants (an abort
 * is a finding) and run nothing. Hooks: fuzz_driver_set_cc(cc), fuzz_driver_live() (modules plus
 * allocations still alive). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
static int g_cc = 90;
static long g_live;
static struct { int x; } g_ctx_obj;
static __thread int t_depth;

void fuzz_driver_set_cc(int cc) { g_cc = cc; }
long fuzz_driver_live(void) { return g_live; }

CUresult cuInit(unsigned f) { (void)f; return 0; }
CUresult cuGetErrorName(CUresult r, const char** s) { *s = r == 2 ? "CUDA_ERROR_OUT_OF_MEMORY" : "CUDA_ERROR_X"; return 0; }
CUresult cuDeviceGetCount(int* n) { *n = 1; return 0; }
CUresult cuDeviceGet(int* d, int o) { *d = o; return o ? 101 : 0; }
CUresult cuDeviceGetAttribute(int* v, int a, int d) {
    (void)d;
    if (a == 75) *v = g_cc / 10;
    else if (a == 76) *v = g_cc % 10;
    else if (a == 97) *v = 232448;
    else return 1;
    return 0;
}
CUresult cuDevicePrimaryCtxRetain(void** c, int d) { (void)d; *c = &g_ctx_obj; return 0; }
CUresult cuCtxGetCurrent(void** c) { *c = t_depth ? (void*)&g_ctx_obj : NULL; return 0; }
CUresult cuCtxGetDevice(int* d) { *d = 0; return 0; }
CUresult cuCtxPushCurrent_v2(void* c) { if (c != &g_ctx_obj) return 201; t_depth++; return 0; }
CUresult cuCtxPopCurrent_v2(void** c) { if (!t_depth) return 201; t_depth--; *c = &g_ctx_obj; return 0; }
CUresult cuCtxSynchronize(void) { return t_depth ? 0 : 201; }
CUresult cuStreamGetCtx(void* s, void** c) { *c = &g_ctx_obj; return s ? 0 : 201; }
CUresult cuStreamSynchronize(void* s) { (void)s; return 0; }
CUresult cuModuleLoadData(void** m, const void* image) {
    if (!t_depth) return 201;
    if (*(const unsigned char*)image == 0xEE) return 200;
    *m = malloc(1);
    g_live++;
    return 0;
}
CUresult cuModuleGetFunction(void** f, void* m, const char* name) {
    if (!m) return 400;
    if (!strncmp(name, "missing", 7)) return 500;
    *f = m;
    return 0;
}
CUresult cuModuleUnload(void* m) { free(m); g_live--; return 0; }
CUresult cuFuncSetAttribute(void* f, int a, int v) { (void)f; return a != 8 || v > 232448; }
CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned smem, void* s, void** params, void** extra) {
    (void)f, (void)s;
    if (!t_depth || !gx || !gy || !gz || !bx || !by || !bz || extra || !params) abort();
    if (gy > 65535 || gz > 65535 || (unsigned long long)bx * by * bz > 1024 || smem > 232448) abort();
    unsigned char args[864];
    memcpy(args, params[0], sizeof args);   /* the one PlusArgs parameter, read whole */
    return 0;
}
CUresult cuMemAlloc_v2(unsigned long long* p, size_t n) {
    if (!t_depth) return 201;
    if (!n || n > (1u << 22)) return 2;
    void* m = malloc(n);
    if (!m) return 2;
    g_live++;
    *p = (unsigned long long)(uintptr_t)m;
    return 0;
}
CUresult cuMemFree_v2(unsigned long long p) { free((void*)(uintptr_t)p); g_live--; return 0; }
CUresult cuMemcpyHtoD_v2(unsigned long long d, const void* s, size_t n) { memcpy((void*)(uintptr_t)d, s, n); return 0; }
CUresult cuMemcpyDtoH_v2(void* d, unsigned long long s, size_t n) { memcpy(d, (const void*)(uintptr_t)s, n); return 0; }
