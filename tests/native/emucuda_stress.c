/* Stress of the emulated CUDA driver's thread safety, built with emucuda.c under AddressSanitizer by
 * tests/native/test_emucuda_stress.py (no Python: the callbacks are C functions standing in for
 * plus_ep/verification/emulator.py's).
 *
 * Threads, for `seconds` seconds:
 * - 2 workers: create a stream, load a module, queue a launch and an event on the stream, destroy the
 *   stream (CUDA runs its queued work first), synchronize the event (it outlives its stream), unload;
 * - 1 waiter: cuCtxSynchronize and cuMemAlloc/cuMemFree, which run every stream's queued work, picking
 *   streams the workers are destroying;
 * - 1 attacher: attaches callbacks that read a heap state, detaches (all NULL), frees the state at once:
 *   safe only because a detach waits for the callbacks in flight.
 * A launch callback sleeps a little, so each of these windows is open often. Any use after free is an
 * ASan report (the process exits non-zero); the counters printed at the end show every path ran. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef int (*load_cb)(const void*, size_t, int, long long*);
typedef int (*getfn_cb)(long long, const char*, long long*);
typedef int (*pack_cb)(long long, void**, unsigned char*, size_t, size_t*);
typedef int (*launch_cb)(long long, const unsigned*, unsigned, const unsigned char*, size_t);
typedef void (*unload_cb)(long long);

void plus_emucuda_attach(load_cb, getfn_cb, pack_cb, launch_cb, unload_cb);
CUresult cuInit(unsigned);
CUresult cuDevicePrimaryCtxRetain(void**, int);
CUresult cuCtxSetCurrent(void*);
CUresult cuCtxSynchronize(void);
CUresult cuStreamCreate(void**, unsigned);
CUresult cuStreamDestroy_v2(void*);
CUresult cuModuleLoadData(void**, const void*);
CUresult cuModuleGetFunction(void**, void*, const char*);
CUresult cuModuleUnload(void*);
CUresult cuLaunchKernel(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**,
                        void**);
CUresult cuEventCreate(void**, unsigned);
CUresult cuEventRecord(void*, void*);
CUresult cuEventSynchronize(void*);
CUresult cuEventDestroy_v2(void*);
CUresult cuMemAlloc_v2(unsigned long long*, size_t);
CUresult cuMemFree_v2(unsigned long long);

typedef struct { atomic_long calls; char pad[256]; } cb_state;   /* what a callback reads: freed at detach */
static cb_state* _Atomic g_state;
static atomic_long g_launched, g_loads, g_detaches, g_failed, g_destroyed;
static atomic_int g_stop;
static atomic_llong g_handles = 1;

static void touch(void) {
    cb_state* s = atomic_load(&g_state);
    if (s) atomic_fetch_add(&s->calls, 1), memset(s->pad, (int)(s->calls & 0xff), sizeof s->pad);
}
static int cb_load(const void* image, size_t size, int is_ptx, long long* h) {
    (void)image, (void)size, (void)is_ptx;
    touch();
    *h = atomic_fetch_add(&g_handles, 1);
    atomic_fetch_add(&g_loads, 1);
    return 0;
}
static int cb_getfn(long long module, const char* name, long long* h) {
    (void)module, (void)name;
    touch();
    *h = atomic_fetch_add(&g_handles, 1);
    return 0;
}
static int cb_pack(long long fn, void** params, unsigned char* buf, size_t cap, size_t* size) {
    (void)fn;
    touch();
    if (cap < 8) return 1;
    memcpy(buf, params[0], 8);
    *size = 8;
    return 0;
}
static int cb_launch(long long fn, const unsigned* dims, unsigned smem, const unsigned char* buf, size_t size) {
    (void)fn, (void)dims, (void)smem, (void)buf, (void)size;
    cb_state* s = atomic_load(&g_state);   /* taken before the sleep: a detach must wait for us */
    usleep(200);
    if (s) atomic_fetch_add(&s->calls, 1), memset(s->pad, 1, sizeof s->pad);
    atomic_fetch_add(&g_launched, 1);
    return 0;
}
static void cb_unload(long long module) { (void)module; touch(); }

static void* ctx;

static void* worker(void* arg) {
    (void)arg;
    cuCtxSetCurrent(ctx);
    unsigned long long word = 0;
    void* params[] = {&word};
    while (!atomic_load(&g_stop)) {
        void *stream = NULL, *mod = NULL, *fn = NULL, *ev = NULL;
        if (cuStreamCreate(&stream, 0)) continue;
        cuEventCreate(&ev, 0);
        if (!cuModuleLoadData(&mod, ".version 8.0\n") && !cuModuleGetFunction(&fn, mod, "k")) {
            if (cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, params, NULL)) atomic_fetch_add(&g_failed, 1);
            cuEventRecord(ev, stream);
        } else {
            atomic_fetch_add(&g_failed, 1);   /* detached: loads fail (CUDA_ERROR_NOT_INITIALIZED) */
            usleep(100);
        }
        usleep(100);   /* the waiter picks the stream while its launch is queued */
        cuStreamDestroy_v2(stream);
        atomic_fetch_add(&g_destroyed, 1);
        cuEventSynchronize(ev);
        cuEventDestroy_v2(ev);
        if (mod) cuModuleUnload(mod);
    }
    return NULL;
}

static void* waiter(void* arg) {
    (void)arg;
    cuCtxSetCurrent(ctx);
    while (!atomic_load(&g_stop)) {
        unsigned long long p = 0;
        cuCtxSynchronize();
        if (!cuMemAlloc_v2(&p, 4096)) cuMemFree_v2(p);
    }
    return NULL;
}

static void* attacher(void* arg) {
    (void)arg;
    while (!atomic_load(&g_stop)) {
        cb_state* s = calloc(1, sizeof *s);
        atomic_store(&g_state, s);
        plus_emucuda_attach(cb_load, cb_getfn, cb_pack, cb_launch, cb_unload);
        usleep(3000);
        atomic_store(&g_state, NULL);
        plus_emucuda_attach(NULL, NULL, NULL, NULL, NULL);   /* returns once no callback is in flight */
        free(s);
        atomic_fetch_add(&g_detaches, 1);
        usleep(500);
    }
    return NULL;
}

int main(int argc, char** argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 2.0;
    if (cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0)) return 2;
    pthread_t t[4];
    pthread_create(&t[0], NULL, worker, NULL);
    pthread_create(&t[1], NULL, worker, NULL);
    pthread_create(&t[2], NULL, waiter, NULL);
    pthread_create(&t[3], NULL, attacher, NULL);
    struct timespec ts = {(time_t)seconds, (long)((seconds - (long)seconds) * 1e9)};
    nanosleep(&ts, NULL);
    atomic_store(&g_stop, 1);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    printf("launched %ld loads %ld detaches %ld streams %ld failed %ld\n", atomic_load(&g_launched),
           atomic_load(&g_loads), atomic_load(&g_detaches), atomic_load(&g_destroyed), atomic_load(&g_failed));
    fflush(stdout);
    return 0;
}
