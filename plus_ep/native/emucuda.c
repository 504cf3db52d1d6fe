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
 *   Every call of a callback holds a use of the attached set (cb_enter/cb_leave); plus_emucuda_attach
 *   (NULLs: detach) returns only once no other thread is inside a callback of the old set, so Python may
 *   free the old callbacks after it returns. emulator.py detaches at interpreter exit, before module
 *   teardown: a session destroyed after that unloads its modules without calling into Python, and a
 *   launch or load then fails with CUDA_ERROR_NOT_INITIALIZED naming the detached interpreter.
 * - The device reports what plus_emucuda_set_device sets: compute capability, SM count and opt-in shared
 *   memory per block, which plus_ep/verification/emulator.py (Emulator.set_arch) takes from kernels/arch.py's row of
 *   the arch under test (its reference part: A100 108 SMs for sm_80, ..., H100 SXM5 132 for sm_90a), so
 *   the launcher picks that arch's image and sizes exactly as on that GPU. Until then: 9.0, 132, 232448.
 * - A callback that fails stores a message for its thread; cuGetErrorName of that code then returns
 *   "CUDA_ERROR_X: <message>", which the launcher puts in the ORT error naming the node.
 * - Device memory is not host memory to the driver API: a copy whose device side is not inside an
 *   allocation, or whose host side is, fails with CUDA_ERROR_INVALID_VALUE; a kernel parameter word that
 *   points into mapped host memory outside every allocation (a host pointer handed to a kernel, an
 *   illegal address on a GPU) fails the launch (emulator.py's pack callback checks it at cuLaunchKernel).
 * - Streams are stream ordered, as on a GPU: work queued on a stream (launches, async copies, async
 *   frees, graph launches) runs only when something waits for it: cuStreamSynchronize, cuCtxSynchronize,
 *   cuMemFree, a DtoH copy into host memory on that stream, or (for streams created without
 *   CU_STREAM_NON_BLOCKING) any operation on the legacy NULL stream, which waits for every blocking
 *   stream. So a missing synchronisation reads stale (poisoned) memory here too. A queued launch that
 *   fails reports at the wait that ran it, with the kernel and node in the message.
 * - Stream capture (cuStreamBeginCapture ... cuStreamEndCapture, cuGraphInstantiate, cuGraphLaunch):
 *   work on a capturing stream is recorded, not run; what CUDA forbids during a capture fails as it does
 *   there (legacy-stream work and synchronisation: CUDA_ERROR_STREAM_CAPTURE_IMPLICIT / UNSUPPORTED, and
 *   the capture is invalidated; cuMemAlloc / cuMemFree in the capturing thread unless the capture mode
 *   is relaxed). Memory allocated with cuMemAllocAsync while capturing belongs to the graph.
 * - cuTensorMapEncodeTiled hands its arguments to Python (plus_emucuda_attach_tmap), which applies the driver's
 *   documented requirements and writes the interpreter's encoding (kernels/ptx/tensormap.py) into the
 *   128-byte CUtensorMap; a refused map fails with CUDA_ERROR_INVALID_VALUE naming the rule. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;
enum { OK = 0, E_INVALID_VALUE = 1, E_OUT_OF_MEMORY = 2, E_NOT_INITIALIZED = 3, E_NO_DEVICE = 100,
       E_INVALID_IMAGE = 200, E_INVALID_CONTEXT = 201, E_INVALID_PTX = 218, E_INVALID_HANDLE = 400,
       E_NOT_FOUND = 500, E_NOT_READY = 600, E_ILLEGAL_ADDRESS = 700, E_LAUNCH_FAILED = 719,
       E_CAPTURE_UNSUPPORTED = 900, E_CAPTURE_INVALIDATED = 901, E_CAPTURE_UNMATCHED = 903,
       E_CAPTURE_IMPLICIT = 906, E_CAPTURE_WRONG_THREAD = 908 };

#define CTX_MAGIC 0xE3C7u
#define MOD_MAGIC 0xE30Du
#define FN_MAGIC 0xE3F0u
#define STREAM_MAGIC 0xE35Au
#define GRAPH_MAGIC 0xE36Au
#define EXEC_MAGIC 0xE3E6u
#define EVENT_MAGIC 0xE3EEu
#define PARAM_CAP 8192      /* bytes of one launch's packed parameters */

/* Python callbacks: return a CUresult; on failure they call plus_emucuda_set_error first. */
typedef int (*load_cb)(const void* image, size_t size, int is_ptx, long long* handle);
typedef int (*getfn_cb)(long long module, const char* name, long long* handle);
/* pack: the launch's parameters into buf (their declared sizes and offsets), *size = bytes; checks that
 * no parameter word is a host pointer. launch: run the packed launch (now, or when its stream runs). */
typedef int (*pack_cb)(long long function, void** params, unsigned char* buf, size_t cap, size_t* size);
typedef int (*launch_cb)(long long function, const unsigned* dims, unsigned smem, const unsigned char* buf,
                         size_t size);
typedef void (*unload_cb)(long long module);
/* tmap: cuTensorMapEncodeTiled's arguments (rank entries each; strides rank - 1) -> the 128 bytes at out. */
typedef int (*tmap_cb)(void* out, int dtype, unsigned rank, unsigned long long address, const unsigned long long* dims,
                       const unsigned long long* strides, const unsigned* box, const unsigned* estr, int interleave,
                       int swizzle, int l2, int oob);

typedef struct { unsigned magic; int dev; } emu_ctx;
typedef struct emu_fn emu_fn;
typedef struct { unsigned magic; emu_ctx* ctx; long long handle; emu_fn* fns; } emu_mod;
struct emu_fn { unsigned magic; emu_mod* mod; long long handle; int max_dyn_smem; emu_fn* next; };   /* next: the module's */

typedef struct { load_cb load; getfn_cb getfn; pack_cb pack; launch_cb launch; unload_cb unload; tmap_cb tmap; } emu_callbacks;
static emu_callbacks g_cb;
static int g_cb_users;                                  /* callback calls in flight (g_lock) */
static long g_live_fns;                                 /* emu_fn structs not freed yet (g_lock) */
static pthread_cond_t g_cb_idle = PTHREAD_COND_INITIALIZER;
static __thread int t_cb_depth;                         /* this thread's callback calls in flight */
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
/* Replace the callbacks (all NULL: detach) and wait until no other thread is inside one of the old set
 * (a thread that attaches from inside a callback does not wait for itself). Python calls it through ctypes,
 * which releases the GIL for the call, so a callback that needs the GIL to finish can. */
EXPORT void plus_emucuda_attach(load_cb l, getfn_cb g, pack_cb p, launch_cb la, unload_cb u) {
    pthread_mutex_lock(&g_lock);
    g_cb = (emu_callbacks){l, g, p, la, u, NULL};
    while (g_cb_users > t_cb_depth) pthread_cond_wait(&g_cb_idle, &g_lock);
    pthread_mutex_unlock(&g_lock);
}
EXPORT int plus_emucuda_attached(void) {
    pthread_mutex_lock(&g_lock);
    int on = g_cb.load != NULL;
    pthread_mutex_unlock(&g_lock);
    return on;
}
/* The callbacks as attached now, held until cb_leave: a detach waits for the holders. */
static emu_callbacks cb_enter(void) {
    pthread_mutex_lock(&g_lock);
    emu_callbacks c = g_cb;
    g_cb_users++;
    t_cb_depth++;
    pthread_mutex_unlock(&g_lock);
    return c;
}
static void cb_leave(void) {
    pthread_mutex_lock(&g_lock);
    g_cb_users--;
    t_cb_depth--;
    pthread_cond_broadcast(&g_cb_idle);
    pthread_mutex_unlock(&g_lock);
}
#define DETACHED "no PTX interpreter is attached to the emulated CUDA driver (detached at interpreter exit, " \
                 "or never attached: use plus_ep.verification.emulator.Emulator, e.g. through `plus-ep verify`)"
/* The tensor-map encoder, attached after plus_emucuda_attach (which detaches it with the rest). */
EXPORT void plus_emucuda_attach_tmap(tmap_cb t) {
    pthread_mutex_lock(&g_lock);
    g_cb.tmap = t;
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
EXPORT long plus_emucuda_live_functions(void) {   /* cuModuleGetFunction handles whose module is loaded */
    pthread_mutex_lock(&g_lock);
    long n = g_live_fns;
    pthread_mutex_unlock(&g_lock);
    return n;
}
EXPORT long plus_emucuda_live_allocations(void) {
    pthread_mutex_lock(&g_lock);
    long n = (long)g_nallocs;
    pthread_mutex_unlock(&g_lock);
    return n;
}

/* 1 when [p, p + n) lies inside one allocation. */
static int in_allocation(uintptr_t p, size_t n) {
    uintptr_t base;
    size_t size;
    return plus_emucuda_lookup(p, &base, &size) && p + n <= base + size;
}
/* 1 when the page holding p is mapped in this process (msync fails with ENOMEM on unmapped pages). */
EXPORT int plus_emucuda_host_mapped(uintptr_t p) {
    static long page;
    if (!page) page = sysconf(_SC_PAGESIZE);
    if (p < (uintptr_t)page) return 0;
    return msync((void*)(p & ~(uintptr_t)(page - 1)), (size_t)page, MS_ASYNC) == 0 || errno != ENOMEM;
}

/* ---- driver API ---- */
static emu_ctx* current(void) { return t_depth ? t_stack[t_depth - 1] : NULL; }

static CUresult fail(CUresult code, const char* msg) {
    plus_emucuda_set_error(code, msg);
    return code;
}

/* ---- streams: queued work, run when waited for ---- */
enum { OP_LAUNCH, OP_COPY, OP_FREE, OP_EVENT };
/* An event: done with the host time (ms) at which its stream reached it (so an elapsed time here is the
 * interpreter's time for the work between two events, not a device time). */
typedef struct emu_event { unsigned magic; int done; double ms; void* stream; } emu_event;
static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
typedef struct emu_op {
    int kind;
    long long fn;             /* launch */
    unsigned dims[6], smem;
    unsigned char* bytes;     /* launch: packed parameters; copy: the host source's snapshot (NULL: DtoD) */
    size_t n;                 /* their size; copy: bytes to copy */
    uintptr_t dst, src;       /* copy (src for DtoD); free: dst; event: dst = the emu_event */
    struct emu_op* next;
} emu_op;

typedef struct emu_graph {
    unsigned magic;
    emu_op* head;
    emu_op** tail;
    uintptr_t* owned;         /* cuMemAllocAsync'ed while capturing: the graph's memory */
    size_t n_owned, cap_owned;
    int refs;                 /* the graph itself and each instantiation */
} emu_graph;

typedef struct { unsigned magic; emu_op* head; emu_graph* graph; } emu_exec;

typedef struct emu_stream {
    unsigned magic;
    int nonblocking;
    emu_op* head;
    emu_op** tail;
    emu_graph* capture;       /* capturing into this graph */
    int capture_mode, invalidated;
    pthread_t capture_thread;
    int busy;                 /* run_streams is running its work (g_qlock): cuStreamDestroy waits */
    struct emu_stream* next;  /* every live stream */
} emu_stream;

static pthread_mutex_t g_qlock = PTHREAD_MUTEX_INITIALIZER;     /* queues, stream list, captures */
static pthread_cond_t g_qidle = PTHREAD_COND_INITIALIZER;       /* a stream stopped being busy */
static pthread_mutex_t g_exec = PTHREAD_MUTEX_INITIALIZER;      /* one stream's work runs at a time */
static emu_stream* g_streams;
static int g_captures;                                          /* streams capturing now */

static void op_free(emu_op* o) {
    if (o) free(o->bytes), free(o);
}
static void ops_free(emu_op* o) {
    while (o) {
        emu_op* n = o->next;
        op_free(o);
        o = n;
    }
}
static emu_op* op_clone(const emu_op* o) {
    emu_op* c = malloc(sizeof *c);
    if (!c) return NULL;
    *c = *o;
    c->next = NULL;
    c->bytes = NULL;
    if (o->bytes) {
        if (!(c->bytes = malloc(o->n ? o->n : 1))) return free(c), NULL;
        memcpy(c->bytes, o->bytes, o->n);
    }
    return c;
}

static int is_legacy(void* s) { return !s || s == (void*)1; }   /* NULL or CU_STREAM_LEGACY */
/* A live stream of this driver, found by its handle in the list (a destroyed or foreign handle is never
 * dereferenced: an event may outlive the stream it was recorded on). */
static emu_stream* as_stream(void* s) {
    if (is_legacy(s)) return NULL;
    emu_stream* found = NULL;
    pthread_mutex_lock(&g_qlock);
    for (emu_stream* st = g_streams; st && !found; st = st->next)
        if (st == s && st->magic == STREAM_MAGIC) found = st;
    pthread_mutex_unlock(&g_qlock);
    return found;
}

/* Run one op now (the exec lock held). */
static CUresult op_run(const emu_op* o) {
    switch (o->kind) {
    case OP_LAUNCH: {
        emu_callbacks cb = cb_enter();
        CUresult r = cb.launch ? cb.launch(o->fn, o->dims, o->smem, o->bytes, o->n) : fail(E_NOT_INITIALIZED, DETACHED);
        cb_leave();
        return r;
    }
    case OP_COPY:
        memmove((void*)o->dst, o->bytes ? (const void*)o->bytes : (const void*)o->src, o->n);
        return OK;
    case OP_FREE:
        if (!alloc_remove(o->dst)) return fail(E_INVALID_VALUE, "cuMemFreeAsync of a pointer that is not an allocation");
        free((void*)o->dst);
        return OK;
    case OP_EVENT: {
        emu_event* e = (emu_event*)o->dst;
        if (e->magic == EVENT_MAGIC) e->ms = now_ms(), e->done = 1;
        return OK;
    }
    }
    return E_INVALID_VALUE;
}

/* Run a stream's queued work in order; the first failure is returned (its message is this thread's). */
static CUresult stream_run(emu_stream* s) {
    CUresult first = OK;
    char msg[sizeof t_err] = "";
    pthread_mutex_lock(&g_exec);
    for (;;) {
        pthread_mutex_lock(&g_qlock);
        emu_op* o = s->head;
        if (o && !(s->head = o->next)) s->tail = &s->head;
        pthread_mutex_unlock(&g_qlock);
        if (!o) break;
        CUresult r = op_run(o);
        if (r && !first) {
            first = r;
            snprintf(msg, sizeof msg, "queued %s on stream %p failed: %s",
                     o->kind == OP_LAUNCH ? "kernel launch" : o->kind == OP_COPY ? "copy" : "free or event", (void*)s,
                     r == t_err_code ? t_err : "?");
        }
        op_free(o);
    }
    pthread_mutex_unlock(&g_exec);
    if (first) plus_emucuda_set_error(first, msg);
    return first;
}

/* Invalidate every capture on a blocking stream (something on the legacy stream would wait for it). */
static int blocking_capture(void) {
    int found = 0;
    pthread_mutex_lock(&g_qlock);
    for (emu_stream* s = g_streams; s; s = s->next)
        if (s->capture && !s->nonblocking) s->invalidated = found = 1;
    pthread_mutex_unlock(&g_qlock);
    return found;
}

/* Legacy-stream semantics: wait for every blocking stream (all streams when `all`). */
static CUresult run_streams(int all) {
    CUresult first = OK;
    for (;;) {   /* the list can change while we run: restart until nothing is left */
        emu_stream* pick = NULL;
        pthread_mutex_lock(&g_qlock);
        for (emu_stream* s = g_streams; s && !pick; s = s->next)
            if (s->head && (all || !s->nonblocking)) pick = s;
        if (pick) pick->busy++;   /* cuStreamDestroy on another thread waits until we are done with it */
        pthread_mutex_unlock(&g_qlock);
        if (!pick) break;
        CUresult r = stream_run(pick);
        pthread_mutex_lock(&g_qlock);
        pick->busy--;
        pthread_cond_broadcast(&g_qidle);
        pthread_mutex_unlock(&g_qlock);
        if (r && !first) first = r;
    }
    return first;
}

/* Run the queued work of the live stream `h` (0 when it was destroyed meanwhile: cuStreamDestroy ran it),
 * holding it busy so a concurrent cuStreamDestroy waits instead of freeing it under us. */
static CUresult stream_run_live(void* h) {
    emu_stream* s = NULL;
    pthread_mutex_lock(&g_qlock);
    for (emu_stream* st = g_streams; st && !s; st = st->next)
        if (st == h) s = st;
    if (s) s->busy++;
    pthread_mutex_unlock(&g_qlock);
    if (!s) return OK;
    CUresult r = stream_run(s);
    pthread_mutex_lock(&g_qlock);
    s->busy--;
    pthread_cond_broadcast(&g_qidle);
    pthread_mutex_unlock(&g_qlock);
    return r;
}

/* Before work on the legacy stream: it waits for the blocking streams, which must not be capturing. */
static CUresult legacy_wait(const char* what) {
    if (g_captures && blocking_capture()) {
        char msg[200];
        snprintf(msg, sizeof msg, "%s on the legacy stream would wait for a stream that is capturing (the capture is "
                 "invalidated)", what);
        return fail(E_CAPTURE_IMPLICIT, msg);
    }
    return run_streams(0);
}

/* CUDA's rule for "unsafe" calls (cuMemAlloc, cuMemFree) during a capture: refused in global mode, in the
 * capturing thread in thread-local mode, allowed in relaxed mode. */
static CUresult capture_forbids(const char* what) {
    if (!g_captures) return OK;
    int bad = 0;
    pthread_mutex_lock(&g_qlock);
    for (emu_stream* s = g_streams; s; s = s->next)
        if (s->capture && (s->capture_mode == 0 || (s->capture_mode == 1 && pthread_equal(s->capture_thread,
                                                                                          pthread_self()))))
            s->invalidated = bad = 1;
    pthread_mutex_unlock(&g_qlock);
    if (!bad) return OK;
    char msg[160];
    snprintf(msg, sizeof msg, "%s is not allowed while a stream capture is active (global or this thread's)", what);
    return fail(E_CAPTURE_UNSUPPORTED, msg);
}

/* Queue an op on s (recorded into its graph while capturing); the legacy stream runs it at once. */
static CUresult enqueue(void* stream, emu_op* o) {
    if (is_legacy(stream)) {
        CUresult r = legacy_wait("work");
        if (!r) {
            pthread_mutex_lock(&g_exec);
            r = op_run(o);
            pthread_mutex_unlock(&g_exec);
        }
        op_free(o);
        return r;
    }
    emu_stream* s = as_stream(stream);
    if (!s) return op_free(o), fail(E_INVALID_HANDLE, "not a stream of this driver");
    pthread_mutex_lock(&g_qlock);
    if (s->capture) {
        *s->capture->tail = o;
        s->capture->tail = &o->next;
    } else {
        *s->tail = o;
        s->tail = &o->next;
    }
    pthread_mutex_unlock(&g_qlock);
    return OK;
}

EXPORT long plus_emucuda_pending(void) {   /* queued ops on every stream (tests) */
    long n = 0;
    pthread_mutex_lock(&g_qlock);
    for (emu_stream* s = g_streams; s; s = s->next)
        for (emu_op* o = s->head; o; o = o->next) n++;
    pthread_mutex_unlock(&g_qlock);
    return n;
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
    case E_NOT_READY: return "CUDA_ERROR_NOT_READY";
    case E_ILLEGAL_ADDRESS: return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case E_CAPTURE_UNSUPPORTED: return "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED";
    case E_CAPTURE_INVALIDATED: return "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED";
    case E_CAPTURE_UNMATCHED: return "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED";
    case E_CAPTURE_IMPLICIT: return "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT";
    case E_CAPTURE_WRONG_THREAD: return "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD";
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
EXPORT CUresult cuDeviceGetName(char* name, int len, int dev) {   /* what get_ep_devices() shows */
    if (dev != 0 || !name || len < 1) return E_INVALID_VALUE;
    snprintf(name, (size_t)len, "PlusEP emulated GPU (PTX interpreter, sm_%d)", plus_emucuda_get_cc());
    return OK;
}
EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, int dev) {    /* host memory backs it: a nominal size */
    if (dev != 0 || !bytes) return E_INVALID_VALUE;
    *bytes = (size_t)16 << 30;
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
EXPORT CUresult cuCtxSynchronize(void) {
    if (!current()) return E_INVALID_CONTEXT;
    if (g_captures && blocking_capture())
        return fail(E_CAPTURE_UNSUPPORTED, "cuCtxSynchronize while a stream is capturing (the capture is invalidated)");
    return run_streams(1);
}
EXPORT CUresult cuStreamSynchronize(void* stream) {
    if (is_legacy(stream)) return legacy_wait("cuStreamSynchronize");
    emu_stream* s = as_stream(stream);
    if (!s) return fail(E_INVALID_HANDLE, "cuStreamSynchronize: not a stream of this driver");
    if (s->capture) {
        s->invalidated = 1;
        return fail(E_CAPTURE_UNSUPPORTED, "cuStreamSynchronize of a stream that is capturing (the capture is "
                                           "invalidated)");
    }
    return stream_run_live(s);
}
EXPORT CUresult cuStreamCreate(void** out, unsigned flags) {
    if (!current()) return E_INVALID_CONTEXT;
    emu_stream* s = calloc(1, sizeof *s);
    if (!s) return E_OUT_OF_MEMORY;
    s->magic = STREAM_MAGIC;
    s->nonblocking = (flags & 1) != 0;   /* CU_STREAM_NON_BLOCKING */
    s->tail = &s->head;
    pthread_mutex_lock(&g_qlock);
    s->next = g_streams;
    g_streams = s;
    pthread_mutex_unlock(&g_qlock);
    *out = s;
    return OK;
}
EXPORT CUresult cuStreamDestroy_v2(void* stream) {
    emu_stream* s = as_stream(stream);
    if (!s) return E_INVALID_HANDLE;
    if (s->capture) return fail(E_CAPTURE_UNSUPPORTED, "cuStreamDestroy of a stream that is capturing");
    pthread_mutex_lock(&g_qlock);   /* out of the list first: no run_streams picks it after this */
    for (emu_stream** p = &g_streams; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    while (s->busy) pthread_cond_wait(&g_qidle, &g_qlock);
    pthread_mutex_unlock(&g_qlock);
    CUresult r = stream_run(s);   /* CUDA finishes the queued work of a destroyed stream */
    s->magic = 0;
    free(s);
    return r;
}
EXPORT CUresult cuStreamQuery(void* stream) {
    emu_stream* s = as_stream(stream);
    if (!is_legacy(stream) && !s) return E_INVALID_HANDLE;
    return s && s->head ? E_NOT_READY : OK;
}

/* ---- events ---- */
EXPORT CUresult cuEventCreate(emu_event** out, unsigned flags) {
    (void)flags;
    emu_event* e = calloc(1, sizeof *e);
    if (!e) return E_OUT_OF_MEMORY;
    e->magic = EVENT_MAGIC;
    e->done = 1;   /* a never-recorded event counts as complete */
    *out = e;
    return OK;
}
EXPORT CUresult cuEventDestroy_v2(emu_event* e) {
    if (!e || e->magic != EVENT_MAGIC) return E_INVALID_HANDLE;
    run_streams(1);   /* a queued record still points at it */
    e->magic = 0;
    free(e);
    return OK;
}
EXPORT CUresult cuEventRecord(emu_event* e, void* stream) {
    if (!e || e->magic != EVENT_MAGIC) return E_INVALID_HANDLE;
    emu_op* o = calloc(1, sizeof *o);
    if (!o) return E_OUT_OF_MEMORY;
    o->kind = OP_EVENT, o->dst = (uintptr_t)e;
    e->done = 0, e->stream = stream;
    return enqueue(stream, o);
}
EXPORT CUresult cuEventQuery(emu_event* e) {
    if (!e || e->magic != EVENT_MAGIC) return E_INVALID_HANDLE;
    return e->done ? OK : E_NOT_READY;
}
EXPORT CUresult cuEventSynchronize(emu_event* e) {
    if (!e || e->magic != EVENT_MAGIC) return E_INVALID_HANDLE;
    if (e->done) return OK;
    CUresult r = is_legacy(e->stream) ? run_streams(0) : stream_run_live(e->stream);
    return r ? r : e->done ? OK : E_NOT_READY;
}
EXPORT CUresult cuEventElapsedTime_v2(float* ms, emu_event* a, emu_event* b) {
    if (!a || !b || a->magic != EVENT_MAGIC || b->magic != EVENT_MAGIC) return E_INVALID_HANDLE;
    if (!a->done || !b->done) return E_NOT_READY;
    *ms = (float)(b->ms - a->ms);
    return OK;
}

/* ---- stream capture and graphs ---- */
EXPORT CUresult cuStreamBeginCapture_v2(void* stream, int mode) {
    emu_stream* s = as_stream(stream);
    if (!s) return fail(E_INVALID_VALUE, "cuStreamBeginCapture: the legacy stream cannot be captured");
    if (mode < 0 || mode > 2) return E_INVALID_VALUE;
    emu_graph* g = calloc(1, sizeof *g);
    if (!g) return E_OUT_OF_MEMORY;
    g->magic = GRAPH_MAGIC;
    g->tail = &g->head;
    g->refs = 1;
    pthread_mutex_lock(&g_qlock);
    CUresult r = OK;
    if (s->capture) r = E_INVALID_VALUE;
    else {
        s->capture = g, s->capture_mode = mode, s->invalidated = 0, s->capture_thread = pthread_self();
        g_captures++;
    }
    pthread_mutex_unlock(&g_qlock);
    if (r) free(g);
    return r ? fail(r, "cuStreamBeginCapture: the stream is capturing already") : OK;
}
static void graph_unref(emu_graph* g) {
    if (!g || --g->refs > 0) return;
    ops_free(g->head);
    for (size_t i = 0; i < g->n_owned; i++)
        if (alloc_remove(g->owned[i])) free((void*)g->owned[i]);
    free(g->owned);
    g->magic = 0;
    free(g);
}
EXPORT CUresult cuStreamEndCapture(void* stream, emu_graph** out) {
    emu_stream* s = as_stream(stream);
    *out = NULL;
    if (!s) return E_INVALID_HANDLE;
    pthread_mutex_lock(&g_qlock);
    emu_graph* g = s->capture;
    int bad = s->invalidated, wrong = g && s->capture_mode != 2 && !pthread_equal(s->capture_thread, pthread_self());
    if (g && !wrong) s->capture = NULL, g_captures--;
    pthread_mutex_unlock(&g_qlock);
    if (!g) return fail(E_CAPTURE_UNMATCHED, "cuStreamEndCapture of a stream that is not capturing");
    if (wrong) return fail(E_CAPTURE_WRONG_THREAD, "cuStreamEndCapture from another thread than the capture's");
    if (bad) {
        graph_unref(g);
        return fail(E_CAPTURE_INVALIDATED, "the capture was invalidated by an operation it does not allow");
    }
    *out = g;
    return OK;
}
EXPORT CUresult cuStreamIsCapturing(void* stream, int* status) {
    emu_stream* s = as_stream(stream);
    *status = s && s->capture ? (s->invalidated ? 2 : 1) : 0;
    return OK;
}
EXPORT CUresult cuGraphInstantiateWithFlags(emu_exec** out, emu_graph* g, unsigned long long flags) {
    (void)flags;
    if (!g || g->magic != GRAPH_MAGIC) return E_INVALID_VALUE;
    emu_exec* e = calloc(1, sizeof *e);
    if (!e) return E_OUT_OF_MEMORY;
    emu_op** tail = &e->head;
    for (const emu_op* o = g->head; o; o = o->next) {
        if (!(*tail = op_clone(o))) return ops_free(e->head), free(e), E_OUT_OF_MEMORY;
        tail = &(*tail)->next;
    }
    e->magic = EXEC_MAGIC;
    e->graph = g;
    g->refs++;
    *out = e;
    return OK;
}
EXPORT CUresult cuGraphLaunch(emu_exec* e, void* stream) {
    if (!e || e->magic != EXEC_MAGIC) return E_INVALID_VALUE;
    CUresult r = OK;
    for (const emu_op* o = e->head; o && !r; o = o->next) {
        emu_op* c = op_clone(o);
        r = c ? enqueue(stream, c) : E_OUT_OF_MEMORY;
    }
    return r;
}
EXPORT CUresult cuGraphExecDestroy(emu_exec* e) {
    if (!e || e->magic != EXEC_MAGIC) return E_INVALID_VALUE;
    run_streams(1);   /* a launched graph may still be queued */
    ops_free(e->head);
    graph_unref(e->graph);
    e->magic = 0;
    free(e);
    return OK;
}
EXPORT CUresult cuGraphDestroy(emu_graph* g) {
    if (!g || g->magic != GRAPH_MAGIC) return E_INVALID_VALUE;
    graph_unref(g);
    return OK;
}
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
    const unsigned char* d = image;
    int is_ptx = memcmp(d, "\x7f" "ELF", 4) != 0;
    size_t size = is_ptx ? strlen(image) + 1 : elf_size(d);
    if (!size) return fail(E_INVALID_IMAGE, "the image is a 32-bit ELF");
    long long h = 0;
    emu_callbacks cb = cb_enter();
    CUresult r = cb.load ? cb.load(image, size, is_ptx, &h) : fail(E_NOT_INITIALIZED, DETACHED);
    cb_leave();
    if (r) return r;
    emu_mod* m = calloc(1, sizeof *m);
    if (!m) return E_OUT_OF_MEMORY;
    *m = (emu_mod){MOD_MAGIC, current(), h, NULL};
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
    emu_callbacks cb = cb_enter();
    CUresult r = cb.getfn ? cb.getfn(m->handle, name, &h) : fail(E_NOT_INITIALIZED, DETACHED);
    cb_leave();
    if (r) return r;
    emu_fn* fn = calloc(1, sizeof *fn);
    if (!fn) return E_OUT_OF_MEMORY;
    *fn = (emu_fn){FN_MAGIC, m, h, 48 * 1024, m->fns};
    m->fns = fn;
    pthread_mutex_lock(&g_lock);
    g_live_fns++;
    pthread_mutex_unlock(&g_lock);
    *f = fn;
    return OK;
}
EXPORT CUresult cuModuleUnload(emu_mod* m) {
    if (!m || m->magic != MOD_MAGIC) return E_INVALID_HANDLE;
    if (current() != m->ctx) return E_INVALID_CONTEXT;
    m->magic = 0;
    emu_callbacks cb = cb_enter();
    if (cb.unload) cb.unload(m->handle);   /* detached: Python's module table is gone with the interpreter */
    cb_leave();
    for (emu_fn *fn = m->fns, *next; fn; fn = next) {   /* its functions go with it, as in CUDA */
        next = fn->next;
        fn->magic = 0;
        free(fn);
        pthread_mutex_lock(&g_lock);
        g_live_fns--;
        pthread_mutex_unlock(&g_lock);
    }
    free(m);
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
    if (!is_legacy(stream) && !as_stream(stream)) return fail(E_INVALID_HANDLE, "cuLaunchKernel: not a stream of this driver");
    emu_op* o = calloc(1, sizeof *o);
    if (!o || !(o->bytes = malloc(PARAM_CAP))) return free(o), E_OUT_OF_MEMORY;
    emu_callbacks cb = cb_enter();
    CUresult r = cb.pack ? cb.pack(f->handle, params, o->bytes, PARAM_CAP, &o->n) : fail(E_NOT_INITIALIZED, DETACHED);
    cb_leave();
    if (r) return op_free(o), r;   /* the parameters are checked when the launch is made, as its error */
    o->kind = OP_LAUNCH, o->fn = f->handle, o->smem = smem;
    unsigned dims[6] = {gx, gy, gz, bx, by, bz};
    memcpy(o->dims, dims, sizeof dims);
    return enqueue(stream, o);
}

/* Tensor maps (compute capability 9.0+): the encoding and its checks are Python's (kernels/ptx/tensormap.py). */
EXPORT CUresult cuTensorMapEncodeTiled(void* tensorMap, int dtype, unsigned rank, void* globalAddress,
                                       const unsigned long long* globalDim, const unsigned long long* globalStrides,
                                       const unsigned* boxDim, const unsigned* elementStrides, int interleave,
                                       int swizzle, int l2Promotion, int oobFill) {
    if (!tensorMap || (uintptr_t)tensorMap % 64) return fail(E_INVALID_VALUE, "cuTensorMapEncodeTiled: tensorMap address must be aligned to 64 bytes");
    if (!globalDim || !boxDim || !elementStrides || (rank > 1 && !globalStrides) || rank < 1 || rank > 5)
        return fail(E_INVALID_VALUE, "cuTensorMapEncodeTiled: tensorRank must be 1 to 5, with globalDim, globalStrides (rank > 1), boxDim and elementStrides");
    if (g_cc < 90) return fail(E_INVALID_VALUE, "cuTensorMapEncodeTiled: tensor maps need compute capability 9.0 or higher");
    unsigned long long none = 0;
    emu_callbacks cb = cb_enter();
    CUresult r = cb.tmap ? cb.tmap(tensorMap, dtype, rank, (unsigned long long)(uintptr_t)globalAddress, globalDim,
                                   globalStrides ? globalStrides : &none, boxDim, elementStrides, interleave, swizzle,
                                   l2Promotion, oobFill)
                         : fail(E_NOT_INITIALIZED, DETACHED " (tensor maps)");
    cb_leave();
    return r;
}

static CUresult mem_alloc(unsigned long long* p, size_t n) {
    if (!current()) return E_INVALID_CONTEXT;
    if (!n) return E_INVALID_VALUE;
    void* m = NULL;
    if (posix_memalign(&m, 256, n)) return E_OUT_OF_MEMORY;
    memset(m, 0xFF, n);   /* poison (NaN in every float width): an output a kernel never writes shows */
    if (alloc_add((uintptr_t)m, n)) return free(m), E_OUT_OF_MEMORY;
    *p = (unsigned long long)(uintptr_t)m;
    return OK;
}
EXPORT CUresult cuMemAlloc_v2(unsigned long long* p, size_t n) {
    CUresult r = capture_forbids("cuMemAlloc");
    return r ? r : mem_alloc(p, n);
}
EXPORT CUresult cuMemFree_v2(unsigned long long p) {
    CUresult r = capture_forbids("cuMemFree");
    if (r) return r;
    if (!p || !in_allocation((uintptr_t)p, 1)) return fail(E_INVALID_VALUE, "cuMemFree of a pointer that is not an allocation");
    r = run_streams(1);   /* cuMemFree waits for the work that may still use the memory */
    if (!alloc_remove((uintptr_t)p)) return E_INVALID_VALUE;
    free((void*)(uintptr_t)p);
    return r;
}
EXPORT CUresult cuMemAllocAsync(unsigned long long* p, size_t n, void* stream) {
    emu_stream* s = as_stream(stream);
    if (!is_legacy(stream) && !s) return E_INVALID_HANDLE;
    CUresult r = mem_alloc(p, n);
    if (r || !s || !s->capture) return r;
    emu_graph* g = s->capture;   /* allocated by the graph: it lives as long as the graph */
    pthread_mutex_lock(&g_qlock);
    if (g->n_owned == g->cap_owned) {
        size_t cap = g->cap_owned ? 2 * g->cap_owned : 16;
        uintptr_t* v = realloc(g->owned, cap * sizeof *v);
        if (v) g->owned = v, g->cap_owned = cap;
    }
    if (g->n_owned < g->cap_owned) g->owned[g->n_owned++] = (uintptr_t)*p;
    else r = E_OUT_OF_MEMORY;
    pthread_mutex_unlock(&g_qlock);
    return r;
}
EXPORT CUresult cuMemFreeAsync(unsigned long long p, void* stream) {
    emu_stream* s = as_stream(stream);
    if (!is_legacy(stream) && !s) return E_INVALID_HANDLE;
    if (!p || !in_allocation((uintptr_t)p, 1)) return fail(E_INVALID_VALUE, "cuMemFreeAsync of a pointer that is not an allocation");
    if (s && s->capture) {
        for (size_t i = 0; i < s->capture->n_owned; i++)
            if (s->capture->owned[i] == (uintptr_t)p) return OK;   /* the graph's own memory: freed with it */
        s->invalidated = 1;
        return fail(E_CAPTURE_UNSUPPORTED, "cuMemFreeAsync of memory the capture did not allocate");
    }
    emu_op* o = calloc(1, sizeof *o);
    if (!o) return E_OUT_OF_MEMORY;
    o->kind = OP_FREE, o->dst = (uintptr_t)p;
    return enqueue(stream, o);
}

/* Copies: the device side must be inside an allocation, the host side outside every one. */
static CUresult check_copy(uintptr_t dev, size_t n, const void* host, const char* what) {
    char msg[200];
    if (!current()) return E_INVALID_CONTEXT;
    if (n && !in_allocation(dev, n)) {
        snprintf(msg, sizeof msg, "%s: the device range [%#lx, +%zu) is not inside one device allocation", what,
                 (unsigned long)dev, n);
        return fail(E_INVALID_VALUE, msg);
    }
    if (host && n && in_allocation((uintptr_t)host, 1)) {
        snprintf(msg, sizeof msg, "%s: the host pointer %p is device memory", what, host);
        return fail(E_INVALID_VALUE, msg);
    }
    return OK;
}
static CUresult copy_now(void* dst, const void* src, size_t n) {
    pthread_mutex_lock(&g_exec);
    memmove(dst, src, n);
    pthread_mutex_unlock(&g_exec);
    return OK;
}
EXPORT CUresult cuMemcpyHtoD_v2(unsigned long long dst, const void* src, size_t n) {
    CUresult r = check_copy((uintptr_t)dst, n, src, "cuMemcpyHtoD");
    if (!r) r = legacy_wait("cuMemcpyHtoD");
    return r ? r : copy_now((void*)(uintptr_t)dst, src, n);
}
EXPORT CUresult cuMemcpyDtoH_v2(void* dst, unsigned long long src, size_t n) {
    CUresult r = check_copy((uintptr_t)src, n, dst, "cuMemcpyDtoH");
    if (!r) r = legacy_wait("cuMemcpyDtoH");
    return r ? r : copy_now(dst, (const void*)(uintptr_t)src, n);
}
EXPORT CUresult cuMemcpyDtoD_v2(unsigned long long dst, unsigned long long src, size_t n) {
    CUresult r = check_copy((uintptr_t)dst, n, NULL, "cuMemcpyDtoD");
    if (!r) r = check_copy((uintptr_t)src, n, NULL, "cuMemcpyDtoD");
    if (!r) r = legacy_wait("cuMemcpyDtoD");
    return r ? r : copy_now((void*)(uintptr_t)dst, (const void*)(uintptr_t)src, n);
}
/* From pageable host memory: the source is staged at once (CUDA's pageable rule), the copy runs in order. */
EXPORT CUresult cuMemcpyHtoDAsync_v2(unsigned long long dst, const void* src, size_t n, void* stream) {
    if (is_legacy(stream)) return cuMemcpyHtoD_v2(dst, src, n);
    CUresult r = check_copy((uintptr_t)dst, n, src, "cuMemcpyHtoDAsync");
    emu_stream* s = as_stream(stream);
    if (!r && !s) r = E_INVALID_HANDLE;
    if (!r && s->capture) {
        s->invalidated = 1;
        r = fail(E_CAPTURE_UNSUPPORTED, "cuMemcpyHtoDAsync from pageable host memory while capturing");
    }
    if (r) return r;
    emu_op* o = calloc(1, sizeof *o);
    if (!o || !(o->bytes = malloc(n ? n : 1))) return free(o), E_OUT_OF_MEMORY;
    memcpy(o->bytes, src, n);
    o->kind = OP_COPY, o->dst = (uintptr_t)dst, o->n = n;
    return enqueue(stream, o);
}
/* Into pageable host memory: synchronous with the host (CUDA's rule): the stream's work first. */
EXPORT CUresult cuMemcpyDtoHAsync_v2(void* dst, unsigned long long src, size_t n, void* stream) {
    if (is_legacy(stream)) return cuMemcpyDtoH_v2(dst, src, n);
    CUresult r = check_copy((uintptr_t)src, n, dst, "cuMemcpyDtoHAsync");
    emu_stream* s = as_stream(stream);
    if (!r && !s) r = E_INVALID_HANDLE;
    if (!r && s->capture) {
        s->invalidated = 1;
        r = fail(E_CAPTURE_UNSUPPORTED, "cuMemcpyDtoHAsync into pageable host memory while capturing");
    }
    if (!r) r = stream_run(s);
    return r ? r : copy_now(dst, (const void*)(uintptr_t)src, n);
}
EXPORT CUresult cuMemcpyDtoDAsync_v2(unsigned long long dst, unsigned long long src, size_t n, void* stream) {
    if (is_legacy(stream)) return cuMemcpyDtoD_v2(dst, src, n);
    CUresult r = check_copy((uintptr_t)dst, n, NULL, "cuMemcpyDtoDAsync");
    if (!r) r = check_copy((uintptr_t)src, n, NULL, "cuMemcpyDtoDAsync");
    if (r) return r;
    emu_op* o = calloc(1, sizeof *o);
    if (!o) return E_OUT_OF_MEMORY;
    o->kind = OP_COPY, o->dst = (uintptr_t)dst, o->src = (uintptr_t)src, o->n = n;
    return enqueue(stream, o);
}
