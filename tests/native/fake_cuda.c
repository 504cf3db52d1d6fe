/* A stand-in for libcuda.so.1 (tests only). It implements the driver entry points the launcher
 * resolves, with host memory as "device" memory, and runs a few named kernels on the host.
 *
 * Environment:
 *   FAKE_CUDA_DEVICES   device count (default 1; 0 = "no device")
 *   FAKE_CUDA_CC        compute capability per device, comma separated, e.g. "90" or "90,80" (default 90)
 *   FAKE_CUDA_INIT_FAIL cuInit returns CUDA_ERROR_NO_DEVICE (100)
 *   FAKE_CUDA_OPTIN     shared-memory opt-in limit per block (default 232448)
 *   FAKE_CUDA_LOG       append one line per event (load, unload, attr, launch, sync) to this file
 *
 * Images: "FAKECUBIN\n" then one line per kernel entry the module holds; lines starting with '#' are
 * tags copied to the load log line; the text ends at a NUL. Host implementations (float32 unless said):
 *   fake_add         out0[i] = in0[i] + in1[i]            for i < v0
 *   fake_add_marker  out0[i] = in0[i] + in1[i] + 1000     for i < v0
 *   fake_scale       out0[i] = in0[i] * v1                for i < v0
 *   fake_fill        out0[i] = v1                         for i < v0
 *   fake_copy        memcpy(out0, in0, v0 bytes)
 *   fake_scratch     memset(scratch0, 0x5a, v1 bytes); out0[i] = in0[i] for i < v0
 * Other entries listed in the image launch and do nothing. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plus_plan.h"   /* PlusArgs */

typedef int CUresult;
enum { OK = 0, E_INVALID_VALUE = 1, E_NOT_INITIALIZED = 3, E_NO_DEVICE = 100, E_INVALID_IMAGE = 200,
       E_INVALID_CONTEXT = 201, E_INVALID_HANDLE = 400, E_NOT_FOUND = 500 };

#define MAX_DEV 8
#define CTX_MAGIC 0xC7C7
#define STREAM_MAGIC 0x57EA
#define MOD_MAGIC 0x30D0
#define FN_MAGIC 0xF00F

typedef struct { int magic, dev; } fake_ctx;
typedef struct { int magic; fake_ctx* ctx; } fake_stream;
typedef struct fake_mod fake_mod;
typedef struct { int magic; fake_mod* mod; char name[64]; int max_dyn_smem; } fake_fn;
struct fake_mod { int magic; fake_ctx* ctx; int n; fake_fn fn[16]; char tags[256]; };

static fake_ctx g_ctx[MAX_DEV];
static fake_stream g_streams[MAX_DEV];
static int g_ndev, g_cc[MAX_DEV], g_optin, g_inited;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread fake_ctx* t_stack[32];
static __thread int t_depth;
static atomic_long g_live_allocs, g_launches, g_loads, g_unloads, g_syncs, g_attrs, g_dtoh;
static PlusArgs g_last_args;

static void logf_(const char* fmt, ...) {
    const char* path = getenv("FAKE_CUDA_LOG");
    if (!path || !*path) return;
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
    line[n++] = '\n';
    pthread_mutex_lock(&g_lock);
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd >= 0) {
        ssize_t w = write(fd, line, (size_t)n);
        (void)w;
        close(fd);
    }
    pthread_mutex_unlock(&g_lock);
}

static fake_ctx* current(void) { return t_depth ? t_stack[t_depth - 1] : NULL; }

CUresult cuInit(unsigned flags) {
    (void)flags;
    if (getenv("FAKE_CUDA_INIT_FAIL")) return E_NO_DEVICE;
    const char* d = getenv("FAKE_CUDA_DEVICES");
    g_ndev = d ? atoi(d) : 1;
    if (g_ndev < 0) g_ndev = 0;
    if (g_ndev > MAX_DEV) g_ndev = MAX_DEV;
    const char* cc = getenv("FAKE_CUDA_CC");
    if (!cc) cc = "90";
    for (int i = 0; i < MAX_DEV; i++) {
        g_cc[i] = atoi(cc);
        const char* comma = strchr(cc, ',');
        if (comma) cc = comma + 1;
        g_ctx[i].magic = CTX_MAGIC, g_ctx[i].dev = i;
        g_streams[i].magic = STREAM_MAGIC, g_streams[i].ctx = &g_ctx[i];
    }
    const char* o = getenv("FAKE_CUDA_OPTIN");
    g_optin = o ? atoi(o) : 232448;
    g_inited = 1;
    logf_("init devices=%d", g_ndev);
    return OK;
}

CUresult cuGetErrorName(CUresult r, const char** s) {
    switch (r) {
    case OK: *s = "CUDA_SUCCESS"; return OK;
    case E_INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; return OK;
    case E_NO_DEVICE: *s = "CUDA_ERROR_NO_DEVICE"; return OK;
    case E_INVALID_IMAGE: *s = "CUDA_ERROR_INVALID_IMAGE"; return OK;
    case E_INVALID_CONTEXT: *s = "CUDA_ERROR_INVALID_CONTEXT"; return OK;
    case E_INVALID_HANDLE: *s = "CUDA_ERROR_INVALID_HANDLE"; return OK;
    case E_NOT_FOUND: *s = "CUDA_ERROR_NOT_FOUND"; return OK;
    default: *s = NULL; return E_INVALID_VALUE;
    }
}

CUresult cuDeviceGetCount(int* n) { if (!g_inited) return E_NOT_INITIALIZED; *n = g_ndev; return OK; }
CUresult cuDeviceGet(int* d, int ordinal) {
    if (ordinal < 0 || ordinal >= g_ndev) return E_INVALID_VALUE;
    *d = ordinal;
    return OK;
}
CUresult cuDeviceGetAttribute(int* v, int attr, int dev) {
    if (dev < 0 || dev >= g_ndev) return E_INVALID_VALUE;
    if (attr == 75) *v = g_cc[dev] / 10;
    else if (attr == 76) *v = g_cc[dev] % 10;
    else if (attr == 97) *v = g_optin;
    else return E_INVALID_VALUE;
    return OK;
}
CUresult cuDeviceGetName(char* name, int len, int dev) {
    if (dev < 0 || dev >= g_ndev || len < 1) return E_INVALID_VALUE;
    snprintf(name, (size_t)len, "Fake CUDA device %d", dev);
    return OK;
}
CUresult cuDeviceTotalMem_v2(size_t* bytes, int dev) {
    if (dev < 0 || dev >= g_ndev) return E_INVALID_VALUE;
    *bytes = (size_t)(dev + 1) << 30;
    return OK;
}
CUresult cuDevicePrimaryCtxRetain(fake_ctx** c, int dev) {
    if (dev < 0 || dev >= g_ndev) return E_INVALID_VALUE;
    *c = &g_ctx[dev];
    return OK;
}
CUresult cuCtxGetCurrent(fake_ctx** c) { *c = current(); return OK; }
CUresult cuCtxGetDevice(int* d) {
    if (!current()) return E_INVALID_CONTEXT;
    *d = current()->dev;
    return OK;
}
CUresult cuCtxPushCurrent_v2(fake_ctx* c) {
    if (!c || c->magic != CTX_MAGIC || t_depth == 32) return E_INVALID_CONTEXT;
    t_stack[t_depth++] = c;
    return OK;
}
CUresult cuCtxPopCurrent_v2(fake_ctx** c) {
    if (!t_depth) return E_INVALID_CONTEXT;
    fake_ctx* top = t_stack[--t_depth];
    if (c) *c = top;
    return OK;
}
CUresult cuCtxSynchronize(void) {
    if (!current()) return E_INVALID_CONTEXT;
    atomic_fetch_add(&g_syncs, 1);
    logf_("sync dev=%d", current()->dev);
    return OK;
}
CUresult cuStreamSynchronize(fake_stream* s) {
    if (s && s->magic != STREAM_MAGIC) return E_INVALID_HANDLE;
    atomic_fetch_add(&g_syncs, 1);
    logf_("stream_sync dev=%d", s ? s->ctx->dev : current() ? current()->dev : -1);
    return OK;
}
CUresult cuStreamGetCtx(fake_stream* s, fake_ctx** c) {
    if (!s) { *c = current(); return *c ? OK : E_INVALID_CONTEXT; }
    if (s->magic != STREAM_MAGIC) return E_INVALID_HANDLE;
    *c = s->ctx;
    return OK;
}

CUresult cuModuleLoadData(fake_mod** out, const void* image) {
    fake_ctx* c = current();
    if (!c) return E_INVALID_CONTEXT;
    const char* s = image;
    if (strncmp(s, "FAKECUBIN\n", 10)) return E_INVALID_IMAGE;
    fake_mod* m = calloc(1, sizeof *m);
    m->magic = MOD_MAGIC;
    m->ctx = c;
    for (const char* p = s + 10; *p && m->n < 16;) {
        size_t n = strcspn(p, "\n");
        if (p[0] == '#') {
            size_t t = strlen(m->tags);
            snprintf(m->tags + t, sizeof m->tags - t, "%s%.*s", t ? " " : "", (int)(n - 1), p + 1);
        } else if (n > 0 && n < 64) {
            fake_fn* f = &m->fn[m->n++];
            f->magic = FN_MAGIC;
            f->mod = m;
            memcpy(f->name, p, n);
        }
        p += n + (p[n] == '\n');
    }
    atomic_fetch_add(&g_loads, 1);
    logf_("load dev=%d entries=%d tags=%s", c->dev, m->n, m->tags);
    *out = m;
    return OK;
}
CUresult cuModuleGetFunction(fake_fn** f, fake_mod* m, const char* name) {
    if (!m || m->magic != MOD_MAGIC) return E_INVALID_HANDLE;
    if (current() != m->ctx) return E_INVALID_CONTEXT;
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->fn[i].name, name)) { *f = &m->fn[i]; return OK; }
    return E_NOT_FOUND;
}
CUresult cuModuleUnload(fake_mod* m) {
    if (!m || m->magic != MOD_MAGIC) return E_INVALID_HANDLE;
    if (current() != m->ctx) return E_INVALID_CONTEXT;
    m->magic = 0;
    atomic_fetch_add(&g_unloads, 1);
    logf_("unload dev=%d tags=%s", m->ctx->dev, m->tags);
    free(m);
    return OK;
}
CUresult cuFuncSetAttribute(fake_fn* f, int attr, int value) {
    if (!f || f->magic != FN_MAGIC) return E_INVALID_HANDLE;
    if (attr != 8 || value > g_optin) return E_INVALID_VALUE;
    f->max_dyn_smem = value;
    atomic_fetch_add(&g_attrs, 1);
    logf_("attr entry=%s max_dynamic_smem=%d", f->name, value);
    return OK;
}

static void run_host(const char* name, const PlusArgs* a) {
    const float* x = a->in[0];
    const float* y = a->in[1];
    float* z = a->out[0];
    long long n = a->v[0];
    if (!strcmp(name, "fake_add"))
        for (long long i = 0; i < n; i++) z[i] = x[i] + y[i];
    else if (!strcmp(name, "fake_add_marker"))
        for (long long i = 0; i < n; i++) z[i] = x[i] + y[i] + 1000.0f;
    else if (!strcmp(name, "fake_scale"))
        for (long long i = 0; i < n; i++) z[i] = x[i] * (float)a->v[1];
    else if (!strcmp(name, "fake_fill"))
        for (long long i = 0; i < n; i++) z[i] = (float)a->v[1];
    else if (!strcmp(name, "fake_copy"))
        memcpy(a->out[0], a->in[0], (size_t)n);
    else if (!strcmp(name, "fake_scratch")) {
        memset(a->scratch[0], 0x5a, (size_t)a->v[1]);
        for (long long i = 0; i < n; i++) z[i] = x[i];
    }
}

CUresult cuLaunchKernel(fake_fn* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned smem, fake_stream* stream, void** params, void** extra) {
    if (!f || f->magic != FN_MAGIC) return E_INVALID_HANDLE;
    fake_ctx* c = current();
    if (c != f->mod->ctx) return E_INVALID_CONTEXT;   /* the function's context must be current */
    if (stream && (stream->magic != STREAM_MAGIC || stream->ctx != c)) return E_INVALID_HANDLE;
    if (!gx || !gy || !gz || !bx || !by || !bz || extra || !params) return E_INVALID_VALUE;
    if (smem > 48 * 1024 && (int)smem > f->max_dyn_smem) return E_INVALID_VALUE;
    PlusArgs a;
    memcpy(&a, params[0], sizeof a);
    pthread_mutex_lock(&g_lock);
    g_last_args = a;
    pthread_mutex_unlock(&g_lock);
    atomic_fetch_add(&g_launches, 1);
    logf_("launch entry=%s grid=%u,%u,%u block=%u,%u,%u smem=%u stream=%s dev=%d in0=%p in1=%p out0=%p scratch0=%p "
          "v=%lld,%lld,%lld,%lld",
          f->name, gx, gy, gz, bx, by, bz, smem, stream ? "ort" : "null", c->dev, a.in[0], a.in[1], a.out[0],
          a.scratch[0], a.v[0], a.v[1], a.v[2], a.v[3]);
    run_host(f->name, &a);
    return OK;
}

CUresult cuMemAlloc_v2(unsigned long long* p, size_t n) {
    if (!current()) return E_INVALID_CONTEXT;
    if (!n) return E_INVALID_VALUE;
    void* m = malloc(n);
    if (!m) return 2;
    atomic_fetch_add(&g_live_allocs, 1);
    *p = (unsigned long long)(size_t)m;
    return OK;
}
CUresult cuMemFree_v2(unsigned long long p) {
    if (!p) return E_INVALID_VALUE;
    atomic_fetch_sub(&g_live_allocs, 1);
    free((void*)(size_t)p);
    return OK;
}
CUresult cuMemcpyHtoD_v2(unsigned long long dst, const void* src, size_t n) {
    if (!current()) return E_INVALID_CONTEXT;
    memcpy((void*)(size_t)dst, src, n);
    return OK;
}
CUresult cuMemcpyDtoH_v2(void* dst, unsigned long long src, size_t n) {
    if (!current()) return E_INVALID_CONTEXT;
    atomic_fetch_add(&g_dtoh, 1);
    memcpy(dst, (const void*)(size_t)src, n);
    return OK;
}

/* ---- test hooks (not part of the driver API) ---- */
void* fake_cuda_stream(int dev) { return dev >= 0 && dev < MAX_DEV ? &g_streams[dev] : NULL; }
long fake_cuda_count(const char* what) {
    if (!strcmp(what, "launch")) return atomic_load(&g_launches);
    if (!strcmp(what, "load")) return atomic_load(&g_loads);
    if (!strcmp(what, "unload")) return atomic_load(&g_unloads);
    if (!strcmp(what, "sync")) return atomic_load(&g_syncs);
    if (!strcmp(what, "attr")) return atomic_load(&g_attrs);
    if (!strcmp(what, "alloc")) return atomic_load(&g_live_allocs);
    if (!strcmp(what, "dtoh")) return atomic_load(&g_dtoh);
    return -1;
}
void fake_cuda_last_args(PlusArgs* out) {
    pthread_mutex_lock(&g_lock);
    *out = g_last_args;
    pthread_mutex_unlock(&g_lock);
}
