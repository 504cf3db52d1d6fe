/* The emulated CUDA driver (plus_ep/_emucuda*.so): the driver entry points the launcher resolves
 * (driver.c) plus the optional ones the plugin EP looks up, for one emulated device on the CPU.
 * Load it with PLUS_EP_CUDA_LIBRARY=<path>; plus_ep/verification/emulator.py attaches the PTX interpreter.
 *
 * - Device memory is host memory: cuMemAlloc is a 256-byte aligned malloc filled with 0xFF bytes (NaN
 *   in every float width, so an output no kernel writes is NaN, never stale data from an earlier
 *   allocation), recorded in a table so the interpreter maps exactly the allocations a launch's
 *   parameters point into.
 * - Modules, functions and launches are Python's: plus_emucuda_attach() registers callbacks (ctypes
 *   callbacks take the GIL, which serialises the interpreter across the launcher's threads). The
 *   loaded image is handed over with its size: an ELF cubin's size from its headers, PTX's strlen + 1.
 * - The device reports what plus_emucuda_set_device sets: compute capability, SM count and opt-in shared
 *   memory per block, which plus_ep/verification/emulator.py (Emulator.set_arch) takes from kernels/arch.py's row of
 *   the arch under test (its reference part: A100 108 SMs for sm_80, ..., H100 SXM5 132 for sm_90a), so
 *   the launcher picks that arch's image and sizes exactly as on that GPU. Until then: 9.0, 132, 232448.
 * - A callback that fails stores a message for its thread; cuGetErrorName of that code then returns
 *   "CUDA_ERROR_X: <message>", which the launcher puts in the ORT error naming the node. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;
enum { OK = 0, E_INVALID_VALUE = 1, E_OUT_OF_MEMORY = 2, E_NOT_INITIALIZED = 3, E_NO_DEVICE = 100,
       E_INVALID_IMAGE = 200, E_INVALID_CONTEXT = 201, E_INVALID_PTX = 218, E_INVALID_HANDLE = 400,
       E_NOT_FOUND = 500, E_LAUNCH_FAILED = 719 };

#define CTX_MAGIC 0xE3C7u
#define MOD_MAGIC 0xE30Du
#define FN_MAGIC 0xE3F0u

/* Python callbacks: return a CUresult; on failure they call plus_emucuda_set_error first. */
typedef int (*load_cb)(const void* image, size_t size, int is_ptx, long long* handle);
typedef int (*getfn_cb)(long long module, const char* name, long long* handle);
typedef int (*launch_cb)(long long function, const unsigned* dims, unsigned smem, void** params);
typedef void (*unload_cb)(long long module);

typedef struct { unsigned magic; int dev; } emu_ctx;
typedef struct { unsigned magic; emu_ctx* ctx; long long handle; } emu_mod;
typedef struct { unsigned magic; emu_mod* mod; long long handle; int max_dyn_smem; } emu_fn;

static struct { load_cb load; getfn_cb getfn; launch_cb launch; unload_cb unload; } g_cb;
static emu_ctx g_ctx = {CTX_MAGIC, 0};
static int g_cc = 90, g_sms = 132, g_smem_optin = 232448, g_inited;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread emu_ctx* t_stack[32];
static __thread int t_depth;
static __thread int t_err_code;
static __thread char t_err[900];

/* ---- allocations: a sorted table of [base, base + size) ---- */
typedef struct { uintptr_t base; size_t size; } alloc_rec;
static alloc_rec* g_allocs;
static size_t g_nallocs, g_capallocs;

static size_t alloc_find(uintptr_t p) {   /* index of the first record with base > p */
    size_t lo = 0, hi = g_nallocs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (g_allocs[mid].base <= p) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static int alloc_add(uintptr_t base, size_t size) {
    pthread_mutex_lock(&g_lock);
    if (g_nallocs == g_capallocs) {
        size_t cap = g_capallocs ? 2 * g_capallocs : 256;
        alloc_rec* n = realloc(g_allocs, cap * sizeof *n);
        if (!n) return pthread_mutex_unlock(&g_lock), -1;
        g_allocs = n, g_capallocs = cap;
    }
    size_t i = alloc_find(base);
    memmove(g_allocs + i + 1, g_allocs + i, (g_nallocs - i) * sizeof *g_allocs);
    g_allocs[i] = (alloc_rec){base, size};
    g_nallocs++;
    pthread_mutex_unlock(&g_lock);
    return 0;
}

static int alloc_remove(uintptr_t base) {
    int found = 0;
    pthread_mutex_lock(&g_lock);
    size_t i = alloc_find(base);
    if (i > 0 && g_allocs[i - 1].base == base) {
        memmove(g_allocs + i - 1, g_allocs + i, (g_nallocs - i) * sizeof *g_allocs);
        g_nallocs--;
        found = 1;
    }
    pthread_mutex_unlock(&g_lock);
    return found;
}

/* ---- exported for plus_ep/verification/emulator.py ---- */
EXPORT void plus_emucuda_attach(load_cb l, getfn_cb g, launch_cb la, unload_cb u) {
    pthread_mutex_lock(&g_lock);
    g_cb.load = l, g_cb.getfn = g, g_cb.launch = la, g_cb.unload = u;
    pthread_mutex_unlock(&g_lock);
}
EXPORT void plus_emucuda_set_device(int major, int minor, int sms, int smem_optin) {
    g_cc = major * 10 + minor, g_sms = sms, g_smem_optin = smem_optin;
}
EXPORT int plus_emucuda_get_cc(void) { return g_cc; }
EXPORT void plus_emucuda_set_error(int code, const char* msg) {
    t_err_code = code;
    snprintf(t_err, sizeof t_err, "%s", msg ? msg : "");
}
/* The allocation holding p: 1 with its base and size, else 0. */
EXPORT int plus_emucuda_lookup(uintptr_t p, uintptr_t* base, size_t* size) {
    int found = 0;
    pthread_mutex_lock(&g_lock);
    size_t i = alloc_find(p);
    if (i > 0 && p < g_allocs[i - 1].base + g_allocs[i - 1].size) {
        *base = g_allocs[i - 1].base, *size = g_allocs[i - 1].size;
        found = 1;
    }
    pthread_mutex_unlock(&g_lock);
    return found;
}
EXPORT long plus_emucuda_live_allocations(void) {
    pthread_mutex_lock(&g_lock);
    long n = (long)g_nallocs;
    pthread_mutex_unlock(&g_lock);
    return n;
}

/* ---- driver API ---- */
static emu_ctx* current(void) { return t_depth ? t_stack[t_depth - 1] : NULL; }

static CUresult fail(CUresult code, const char* msg) {
    plus_emucuda_set_error(code, msg);
    return code;
}

EXPORT CUresult cuInit(unsigned flags) {
    (void)flags;
    g_inited = 1;
    return OK;
}
EXPORT CUresult cuDriverGetVersion(int* v) { *v = 13000; return OK; }

static const char* code_name(CUresult r) {
    switch (r) {
    case OK: return "CUDA_SUCCESS";
    case E_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case E_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
    case E_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
    case E_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
    case E_INVALID_IMAGE: return "CUDA_ERROR_INVALID_IMAGE";
    case E_INVALID_CONTEXT: return "CUDA_ERROR_INVALID_CONTEXT";
    case E_INVALID_PTX: return "CUDA_ERROR_INVALID_PTX";
    case E_INVALID_HANDLE: return "CUDA_ERROR_INVALID_HANDLE";
    case E_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
    case E_LAUNCH_FAILED: return "CUDA_ERROR_LAUNCH_FAILED";
    default: return NULL;
    }
}

EXPORT CUresult cuGetErrorName(CUresult r, const char** s) {
    static __thread char buf[1024];
    const char* name = code_name(r);
    if (!name) return *s = NULL, E_INVALID_VALUE;
    if (r && r == t_err_code && t_err[0]) {   /* this thread's last failure carries the emulator's message */
        snprintf(buf, sizeof buf, "%s: %s", name, t_err);
        *s = buf;
    } else {
        *s = name;
    }
    return OK;
}
EXPORT CUresult cuGetErrorString(CUresult r, const char** s) { return cuGetErrorName(r, s); }

EXPORT CUresult cuDeviceGetCount(int* n) {
    if (!g_inited) return E_NOT_INITIALIZED;
    *n = 1;
    return OK;
}
EXPORT CUresult cuDeviceGet(int* d, int ordinal) {
    if (!g_inited) return E_NOT_INITIALIZED;
    if (ordinal != 0) return E_INVALID_VALUE;
    *d = 0;
    return OK;
}
EXPORT CUresult cuDeviceGetAttribute(int* v, int attr, int dev) {
    if (dev != 0) return E_INVALID_VALUE;
    int cc = plus_emucuda_get_cc();
    if (attr == 75) *v = cc / 10;
    else if (attr == 76) *v = cc % 10;
    else if (attr == 97) *v = g_smem_optin;    /* max shared memory per block, opt-in */
    else if (attr == 16) *v = g_sms;           /* multiprocessors */
    else if (attr == 1) *v = 1024;             /* max threads per block */
    else return E_INVALID_VALUE;
    return OK;
}
EXPORT CUresult cuDeviceGetPCIBusId(char* id, int len, int dev) {
    if (dev != 0 || len < 1) return E_INVALID_VALUE;
    snprintf(id, (size_t)len, "0000:00:00.0");
    return OK;
}
EXPORT CUresult cuDevicePrimaryCtxRetain(emu_ctx** c, int dev) {
    if (dev != 0) return E_INVALID_VALUE;
    *c = &g_ctx;
    return OK;
}
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(int dev) { return dev ? E_INVALID_VALUE : OK; }
EXPORT CUresult cuCtxGetCurrent(emu_ctx** c) { *c = current(); return OK; }
EXPORT CUresult cuCtxSetCurrent(emu_ctx* c) {
    if (c && c->magic != CTX_MAGIC) return E_INVALID_CONTEXT;
    if (!c) { t_depth = 0; return OK; }
    if (t_depth) t_stack[t_depth - 1] = c;
    else t_stack[t_depth++] = c;
    return OK;
}
EXPORT CUresult cuCtxGetDevice(int* d) {
    if (!current()) return E_INVALID_CONTEXT;
    *d = current()->dev;
    return OK;
}
EXPORT CUresult cuCtxPushCurrent_v2(emu_ctx* c) {
    if (!c || c->magic != CTX_MAGIC || t_depth == 32) return E_INVALID_CONTEXT;
    t_stack[t_depth++] = c;
    return OK;
}
EXPORT CUresult cuCtxPopCurrent_v2(emu_ctx** c) {
    if (!t_depth) return E_INVALID_CONTEXT;
    emu_ctx* top = t_stack[--t_depth];
    if (c) *c = top;
    return OK;
}
/* Every launch runs to completion inside cuLaunchKernel: there is never outstanding work. */
EXPORT CUresult cuCtxSynchronize(void) { return current() ? OK : E_INVALID_CONTEXT; }
EXPORT CUresult cuStreamSynchronize(void* s) { (void)s; return OK; }
EXPORT CUresult cuStreamGetCtx(void* s, emu_ctx** c) {
    (void)s;   /* every stream belongs to the one context */
    *c = current() ? current() : &g_ctx;
    return OK;
}

/* Size of an ELF64 image from its headers: the furthest of the section table, the program header
 * table and every section with file contents. 0 when it is not ELF64. */
static size_t elf_size(const unsigned char* d) {
    if (memcmp(d, "\x7f" "ELF", 4) || d[4] != 2) return 0;
    uint64_t phoff, shoff;
    uint16_t phentsize, phnum, shentsize, shnum;
    memcpy(&phoff, d + 0x20, 8), memcpy(&shoff, d + 0x28, 8);
    memcpy(&phentsize, d + 0x36, 2), memcpy(&phnum, d + 0x38, 2);
    memcpy(&shentsize, d + 0x3A, 2), memcpy(&shnum, d + 0x3C, 2);
    uint64_t end = 64;
    if (phoff + (uint64_t)phentsize * phnum > end) end = phoff + (uint64_t)phentsize * phnum;
    if (shoff + (uint64_t)shentsize * shnum > end) end = shoff + (uint64_t)shentsize * shnum;
    for (uint16_t i = 0; i < shnum && shentsize >= 64; i++) {
        const unsigned char* sh = d + shoff + (uint64_t)i * shentsize;
        uint32_t type;
        uint64_t off, size;
        memcpy(&type, sh + 4, 4), memcpy(&off, sh + 24, 8), memcpy(&size, sh + 32, 8);
        if (type != 8 /* NOBITS */ && off + size > end) end = off + size;
    }
    return (size_t)end;
}

EXPORT CUresult cuModuleLoadData(emu_mod** out, const void* image) {
    if (!current()) return E_INVALID_CONTEXT;
    if (!image || !out) return E_INVALID_VALUE;
    if (!g_cb.load)
        return fail(E_NOT_INITIALIZED, "no PTX interpreter is attached to the emulated CUDA driver "
                                       "(use plus_ep.verification.emulator.Emulator, e.g. through `plus-ep verify`)");
    const unsigned char* d = image;
    int is_ptx = memcmp(d, "\x7f" "ELF", 4) != 0;
    size_t size = is_ptx ? strlen(image) + 1 : elf_size(d);
    if (!size) return fail(E_INVALID_IMAGE, "the image is a 32-bit ELF");
    long long h = 0;
    CUresult r = g_cb.load(image, size, is_ptx, &h);
    if (r) return r;
    emu_mod* m = calloc(1, sizeof *m);
    if (!m) return E_OUT_OF_MEMORY;
    *m = (emu_mod){MOD_MAGIC, current(), h};
    *out = m;
    return OK;
}
EXPORT CUresult cuModuleLoadDataEx(emu_mod** out, const void* image, unsigned n, void* o, void** v) {
    (void)n, (void)o, (void)v;
    return cuModuleLoadData(out, image);
}
EXPORT CUresult cuModuleGetFunction(emu_fn** f, emu_mod* m, const char* name) {
    if (!m || m->magic != MOD_MAGIC) return E_INVALID_HANDLE;
    if (current() != m->ctx) return E_INVALID_CONTEXT;
    long long h = 0;
    CUresult r = g_cb.getfn(m->handle, name, &h);
    if (r) return r;
    emu_fn* fn = calloc(1, sizeof *fn);
    if (!fn) return E_OUT_OF_MEMORY;
    *fn = (emu_fn){FN_MAGIC, m, h, 48 * 1024};
    *f = fn;
    return OK;
}
EXPORT CUresult cuModuleUnload(emu_mod* m) {
    if (!m || m->magic != MOD_MAGIC) return E_INVALID_HANDLE;
    if (current() != m->ctx) return E_INVALID_CONTEXT;
    m->magic = 0;
    if (g_cb.unload) g_cb.unload(m->handle);
    free(m);   /* its functions are freed with it by contract (the launcher never uses them after) */
    return OK;
}
EXPORT CUresult cuFuncSetAttribute(emu_fn* f, int attr, int value) {
    if (!f || f->magic != FN_MAGIC) return E_INVALID_HANDLE;
    int optin;
    cuDeviceGetAttribute(&optin, 97, 0);
    if (attr != 8 || value < 0 || value > optin) return E_INVALID_VALUE;
    f->max_dyn_smem = value;
    return OK;
}
EXPORT CUresult cuLaunchKernel(emu_fn* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                               unsigned smem, void* stream, void** params, void** extra) {
    (void)stream;
    if (!f || f->magic != FN_MAGIC) return E_INVALID_HANDLE;
    if (current() != f->mod->ctx) return E_INVALID_CONTEXT;
    if (!gx || !gy || !gz || !bx || !by || !bz || extra || !params)
        return fail(E_INVALID_VALUE, "empty grid or block, or no kernel parameters");
    if (bx * by * bz > 1024) return fail(E_INVALID_VALUE, "more than 1024 threads per block");
    if ((int)smem > f->max_dyn_smem) {
        char msg[160];
        snprintf(msg, sizeof msg, "%u bytes of dynamic shared memory exceed the function's limit of %d "
                 "(cuFuncSetAttribute MAX_DYNAMIC_SHARED_SIZE_BYTES)", smem, f->max_dyn_smem);
        return fail(E_INVALID_VALUE, msg);
    }
    unsigned dims[6] = {gx, gy, gz, bx, by, bz};
    return g_cb.launch(f->handle, dims, smem, params);
}

EXPORT CUresult cuMemAlloc_v2(unsigned long long* p, size_t n) {
    if (!current()) return E_INVALID_CONTEXT;
    if (!n) return E_INVALID_VALUE;
    void* m = NULL;
    if (posix_memalign(&m, 256, n)) return E_OUT_OF_MEMORY;
    memset(m, 0xFF, n);   /* poison (NaN in every float width): an output a kernel never writes shows */
    if (alloc_add((uintptr_t)m, n)) return free(m), E_OUT_OF_MEMORY;
    *p = (unsigned long long)(uintptr_t)m;
    return OK;
}
EXPORT CUresult cuMemFree_v2(unsigned long long p) {
    if (!p || !alloc_remove((uintptr_t)p)) return E_INVALID_VALUE;
    free((void*)(uintptr_t)p);
    return OK;
}
EXPORT CUresult cuMemAllocAsync(unsigned long long* p, size_t n, void* s) { (void)s; return cuMemAlloc_v2(p, n); }
EXPORT CUresult cuMemFreeAsync(unsigned long long p, void* s) { (void)s; return cuMemFree_v2(p); }
EXPORT CUresult cuMemcpyHtoD_v2(unsigned long long dst, const void* src, size_t n) {
    if (!current()) return E_INVALID_CONTEXT;
    memcpy((void*)(uintptr_t)dst, src, n);
    return OK;
}
EXPORT CUresult cuMemcpyDtoH_v2(void* dst, unsigned long long src, size_t n) {
    if (!current()) return E_INVALID_CONTEXT;
    memcpy(dst, (const void*)(uintptr_t)src, n);
    return OK;
}
EXPORT CUresult cuMemcpyDtoD_v2(unsigned long long dst, unsigned long long src, size_t n) {
    if (!current()) return E_INVALID_CONTEXT;
    memmove((void*)(uintptr_t)dst, (const void*)(uintptr_t)src, n);
    return OK;
}
EXPORT CUresult cuMemcpyHtoDAsync_v2(unsigned long long dst, const void* src, size_t n, void* s) {
    (void)s;
    return cuMemcpyHtoD_v2(dst, src, n);
}
EXPORT CUresult cuMemcpyDtoHAsync_v2(void* dst, unsigned long long src, size_t n, void* s) {
    (void)s;
    return cuMemcpyDtoH_v2(dst, src, n);
}
EXPORT CUresult cuMemcpyDtoDAsync_v2(unsigned long long dst, unsigned long long src, size_t n, void* s) {
    (void)s;
    return cuMemcpyDtoD_v2(dst, src, n);
}
