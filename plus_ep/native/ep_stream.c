/* The plugin EP's run hooks on a GPU device: synchronisation at the end of a run, and CUDA graphs.
 *
 * Without another stream-aware EP on the device, PlusEP queues every launch and copy on its own stream
 * of the device (ep_memory.c) and never waits per launch; OnRunEnd waits for that stream when ORT asks
 * (sync_stream), so a run's device outputs are complete when Run returns.
 *
 * CUDA graphs (provider option cuda_graph=1; ORT >= 1.26 calls the OrtEp graph hooks): ORT runs the
 * session normally for `cuda_graph_warmup` runs (default 1); at the next run OnRunStart begins a capture
 * of PlusEP's stream (relaxed mode, so a pool miss may still allocate), every PlusEP launch of the run is
 * recorded, and OnRunEnd ends the capture, instantiates the graph, launches it (this run's work) and
 * keeps it under the run's graph id (run option gpu_graph_id, default 0; -1 = never capture). Later runs
 * with that id do not execute nodes: ORT calls ReplayGraph, which launches the graph and waits for it.
 * The pool blocks freed during the capture belong to the graph until it is released (the replays write
 * them). As with ORT's CUDA EP, the inputs and outputs must be bound in device memory at fixed addresses
 * (IOBinding), and ORT checks at session creation that no node outside PlusEP computes data on the CPU
 * (GetGraphCaptureNodeAssignmentPolicy: CPU nodes are allowed for shapes). Something a capture does not
 * allow (a synchronous copy, a synchronisation) invalidates it: the run fails with the driver's error and
 * that graph id is never captured again. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ep.h"

/* ---- per-node statistics: runs, and device times from CUDA events (kernel_times=1) ----
 * Each timed run records a start and an end event on the node's stream around its launches; the pair
 * waits on the EP's list until OnRunEnd, after the stream was waited for, reads the elapsed time.
 * Nothing waits per launch. Not while a graph is captured (the events would be recorded into it). */
struct plus_ep_stat {
    char node[PLUS_NAME_LEN];
    long long runs, timed;
    double ms_sum, ms_min, ms_max;
    plus_ep_stat* next;
};
static pthread_mutex_t g_stat_lock = PTHREAD_MUTEX_INITIALIZER;
static plus_ep_stat* g_stats;

plus_ep_stat* plus_ep_stat_for(const char* node) {
    pthread_mutex_lock(&g_stat_lock);
    plus_ep_stat* s = g_stats;
    while (s && strcmp(s->node, node)) s = s->next;
    if (!s && (s = calloc(1, sizeof *s))) {
        snprintf(s->node, sizeof s->node, "%s", node);
        s->next = g_stats;
        g_stats = s;
    }
    pthread_mutex_unlock(&g_stat_lock);
    return s;
}

plus_ep_timing* plus_ep_timing_begin(plus_ep* ep, plus_ep_stat* stat, CUstream stream) {
    const plus_event_api* e = plus_ep_event_api();
    if (!stat || !ep->opts.kernel_times || ep->capturing || !stream || !e->ok) return NULL;
    plus_ep_timing* t = ep->spare;
    if (t) ep->spare = t->next;
    else if ((t = calloc(1, sizeof *t)) &&
             (e->cuEventCreate(&t->ev[0], 0) || e->cuEventCreate(&t->ev[1], 0))) {   /* timing events */
        if (t->ev[0]) e->cuEventDestroy(t->ev[0]);
        free(t);
        t = NULL;
    }
    if (!t) return NULL;
    t->stat = stat;
    if (e->cuEventRecord(t->ev[0], stream)) {
        t->next = ep->spare;
        ep->spare = t;
        return NULL;
    }
    return t;
}

void plus_ep_timing_end(plus_ep* ep, plus_ep_stat* stat, plus_ep_timing* t, CUstream stream, int ok) {
    if (ok && stat) {
        pthread_mutex_lock(&g_stat_lock);
        stat->runs++;
        pthread_mutex_unlock(&g_stat_lock);
    }
    if (!t) return;
    if (!ok || plus_ep_event_api()->cuEventRecord(t->ev[1], stream)) {
        t->next = ep->spare;
        ep->spare = t;
        return;
    }
    t->next = ep->pending;
    ep->pending = t;
}

/* Read the run's event pairs (the stream was waited for) into the statistics. */
static void harvest(plus_ep* ep) {
    const plus_event_api* e = plus_ep_event_api();
    while (ep->pending) {
        plus_ep_timing* t = ep->pending;
        ep->pending = t->next;
        float ms = 0;
        if (!e->cuEventSynchronize(t->ev[1]) && !e->cuEventElapsedTime(&ms, t->ev[0], t->ev[1])) {
            pthread_mutex_lock(&g_stat_lock);
            plus_ep_stat* s = t->stat;
            if (!s->timed || ms < s->ms_min) s->ms_min = ms;
            if (!s->timed || ms > s->ms_max) s->ms_max = ms;
            s->ms_sum += ms;
            s->timed++;
            pthread_mutex_unlock(&g_stat_lock);
        }
        t->next = ep->spare;
        ep->spare = t;
    }
}

static void timings_free(plus_ep* ep) {
    const plus_event_api* e = plus_ep_event_api();
    harvest(ep);
    while (ep->spare) {
        plus_ep_timing* t = ep->spare;
        ep->spare = t->next;
        e->cuEventDestroy(t->ev[0]);
        e->cuEventDestroy(t->ev[1]);
        free(t);
    }
}

/* PlusEP_NodeStats(buf, cap): JSON of every node's statistics in this process,
 * [{"node": ..., "runs": n, "timed": n, "ms_sum": x, "ms_min": x, "ms_max": x}, ...]; returns the bytes
 * needed (without the NUL), so a call with cap 0 sizes the buffer. PlusEP_ResetNodeStats() zeroes them. */
__attribute__((visibility("default"))) size_t PlusEP_NodeStats(char* buf, size_t cap) {
    size_t n = 0;
    char tmp[PLUS_NAME_LEN + 256];
    pthread_mutex_lock(&g_stat_lock);
    if (cap) buf[0] = 0;
    {
        if (cap > 1) memcpy(buf, "[", 2);
        n = 1;
        for (plus_ep_stat* s = g_stats; s; s = s->next) {
            char name[2 * PLUS_NAME_LEN];
            char* o = name;
            for (const char* p = s->node; *p && o < name + sizeof name - 2; p++) {
                if (*p == '"' || *p == '\\') *o++ = '\\';
                *o++ = (unsigned char)*p >= 0x20 ? *p : '?';
            }
            *o = 0;
            int k = snprintf(tmp, sizeof tmp, "%s{\"node\": \"%s\", \"runs\": %lld, \"timed\": %lld, \"ms_sum\": %.6f, "
                             "\"ms_min\": %.6f, \"ms_max\": %.6f}", s == g_stats ? "" : ", ", name, s->runs, s->timed,
                             s->ms_sum, s->ms_min, s->ms_max);
            if (cap > n + (size_t)k) memcpy(buf + n, tmp, (size_t)k + 1);
            n += (size_t)k;
        }
        if (cap > n + 1) memcpy(buf + n, "]", 2);
        n += 1;
    }
    pthread_mutex_unlock(&g_stat_lock);
    if (cap && n >= cap) buf[cap - 1] = 0;
    return n;
}

void plus_ep_stats_free(void) {   /* the library is being released (ReleaseEpFactory) */
    pthread_mutex_lock(&g_stat_lock);
    while (g_stats) {
        plus_ep_stat* s = g_stats;
        g_stats = s->next;
        free(s);
    }
    pthread_mutex_unlock(&g_stat_lock);
}

__attribute__((visibility("default"))) void PlusEP_ResetNodeStats(void) {
    pthread_mutex_lock(&g_stat_lock);
    for (plus_ep_stat* s = g_stats; s; s = s->next) s->runs = s->timed = 0, s->ms_sum = s->ms_min = s->ms_max = 0;
    pthread_mutex_unlock(&g_stat_lock);
}

static int graph_id(const OrtRunOptions* ro) {
    const char* v = ro ? ORT_CALL(plus_ep_api, GetRunConfigEntry)(ro, "gpu_graph_id") : NULL;
    return v && *v ? atoi(v) : 0;
}

static plus_ep_graph* find_graph(const plus_ep* ep, int id) {
    for (int i = 0; i < ep->n_graphs; i++)
        if (ep->graphs[i].id == id) return (plus_ep_graph*)&ep->graphs[i];
    return NULL;
}

static OrtStatus* cu_status(const plus_ep* ep, CUresult r, const char* what) {
    char e[PLUS_ERR_LEN / 2];
    plus_cu_error(ep->drv, r, e, sizeof e);
    return plus_ep_status(ORT_EP_FAIL, "PlusEP: %s failed: %s", what, e);
}

/* Push the device's context, get PlusEP's stream. NULL stream: no streams (nothing to do). */
static OrtStatus* enter(const plus_ep* ep, CUstream* stream) {
    char err[PLUS_ERR_LEN];
    CUcontext ctx = plus_ep_primary_ctx(ep->drv, ep->ordinal, err, sizeof err);
    if (!ctx) return plus_ep_status(ORT_EP_FAIL, "%s", err);
    *stream = plus_ep_device_stream(ep->drv, ep->ordinal, err, sizeof err);
    CUresult r = ep->drv->cuCtxPushCurrent(ctx);
    return r ? cu_status(ep, r, "cuCtxPushCurrent") : NULL;
}
static void leave(const plus_ep* ep) {
    CUcontext popped;
    ep->drv->cuCtxPopCurrent(&popped);
}

static OrtStatus* on_run_start(OrtEp* base, const OrtRunOptions* ro) {
    plus_ep* ep = (plus_ep*)base;
    if (!ep->opts.cuda_graph || ep->mode != PLUS_MODE_GPU) return NULL;
    int id = graph_id(ro);
    if (id == -1 || find_graph(ep, id) || ep->n_graphs == PLUS_EP_MAX_GRAPHS) return NULL;
    if (++ep->runs <= ep->opts.cuda_graph_warmup) return NULL;
    const plus_graph_api* g = plus_ep_graph_api();
    if (!g->ok) {
        if (!ep->capture_error[0])
            plus_ep_log(ep->logger, ORT_LOG_WARNING, "PlusEP: cuda_graph=1 but the CUDA driver has no stream capture; "
                        "runs execute without graphs");
        snprintf(ep->capture_error, sizeof ep->capture_error, "no stream capture in the driver");
        return NULL;
    }
    CUstream stream = NULL;
    OrtStatus* st = enter(ep, &stream);
    if (st) return st;
    CUresult r = stream ? g->cuStreamBeginCapture(stream, PLUS_CU_STREAM_CAPTURE_MODE_RELAXED) : 0;
    if (!r && stream) {
        plus_ep_pool_capture(ep->ordinal, ep);
        ep->capturing = 1;
        ep->capture_id = id;
    }
    leave(ep);
    return r ? cu_status(ep, r, "cuStreamBeginCapture") : NULL;
}

/* End the capture of this run: the graph is instantiated, launched (the run's work) and kept. */
static OrtStatus* end_capture(plus_ep* ep, CUstream stream) {
    const plus_graph_api* g = plus_ep_graph_api();
    void* graph = NULL;
    void* exec = NULL;
    ep->capturing = 0;
    CUresult r = g->cuStreamEndCapture(stream, &graph);
    plus_ep_pool_capture(ep->ordinal, NULL);
    plus_ep_graph* slot = &ep->graphs[ep->n_graphs];
    memset(slot, 0, sizeof *slot);
    plus_ep_pool_take_captured(ep->ordinal, &slot->kept);
    if (!r) r = g->cuGraphInstantiate(&exec, graph, 0);
    if (!r) r = g->cuGraphLaunch(exec, stream);
    if (r) {
        char e[PLUS_ERR_LEN / 2];
        plus_cu_error(ep->drv, r, e, sizeof e);
        if (exec) g->cuGraphExecDestroy(exec);
        if (graph) g->cuGraphDestroy(graph);
        plus_ep_pool_release_kept(ep->ordinal, &slot->kept);
        snprintf(ep->capture_error, sizeof ep->capture_error, "%s", e);
        ep->opts.cuda_graph = 0;   /* never again in this session: runs execute without graphs */
        return plus_ep_status(ORT_EP_FAIL, "PlusEP: capturing the run into a CUDA graph failed (%s); this run's "
                              "results are lost, later runs execute without graphs", e);
    }
    slot->id = ep->capture_id;
    slot->graph = graph;
    slot->exec = exec;
    ep->n_graphs++;
    plus_ep_log(ep->logger, ORT_LOG_INFO, "PlusEP: captured CUDA graph %d (%zu pool blocks kept for it)", slot->id,
                slot->kept.n);
    return NULL;
}

static OrtStatus* on_run_end(OrtEp* base, const OrtRunOptions* ro, bool sync) {
    (void)ro;
    plus_ep* ep = (plus_ep*)base;
    if (ep->mode != PLUS_MODE_GPU) return NULL;
    CUstream stream = NULL;
    OrtStatus* st = enter(ep, &stream);
    if (st) return st;
    if (ep->capturing && stream) st = end_capture(ep, stream);
    if (!st && sync && stream) {
        CUresult r = ep->drv->cuStreamSynchronize(stream);
        if (r) st = cu_status(ep, r, "synchronising PlusEP's stream at the end of the run");
    }
    harvest(ep);
    leave(ep);
    return st;
}

static bool graph_enabled(const OrtEp* base) {
    const plus_ep* ep = (const plus_ep*)base;
    return ep->mode == PLUS_MODE_GPU && (ep->opts.cuda_graph || ep->n_graphs);
}

static bool graph_captured(const OrtEp* base, int id) { return find_graph((const plus_ep*)base, id) != NULL; }

static OrtStatus* replay(OrtEp* base, int id) {
    plus_ep* ep = (plus_ep*)base;
    plus_ep_graph* gr = find_graph(ep, id);
    if (!gr) return plus_ep_status(ORT_INVALID_ARGUMENT, "PlusEP: no CUDA graph captured for gpu_graph_id %d", id);
    CUstream stream = NULL;
    OrtStatus* st = enter(ep, &stream);
    if (st) return st;
    CUresult r = plus_ep_graph_api()->cuGraphLaunch(gr->exec, stream);
    if (!r) r = ep->drv->cuStreamSynchronize(stream);
    leave(ep);
    return r ? cu_status(ep, r, "replaying the CUDA graph") : NULL;
}

static int capture_policy(const OrtEp* base) {
    (void)base;
    return ORT_GRAPH_CAPTURE_ALLOW_CPU_FOR_SHAPES;
}

static void drop_graph(plus_ep* ep, plus_ep_graph* gr) {
    const plus_graph_api* g = plus_ep_graph_api();
    if (gr->exec) g->cuGraphExecDestroy(gr->exec);
    if (gr->graph) g->cuGraphDestroy(gr->graph);
    plus_ep_pool_release_kept(ep->ordinal, &gr->kept);
    *gr = ep->graphs[--ep->n_graphs];
}

static OrtStatus* release_graph(OrtEp* base, int id) {
    plus_ep* ep = (plus_ep*)base;
    plus_ep_graph* gr = find_graph(ep, id);
    if (!gr) return NULL;
    CUstream stream = NULL;
    OrtStatus* st = enter(ep, &stream);
    if (st) return st;
    if (stream) ep->drv->cuStreamSynchronize(stream);
    drop_graph(ep, gr);
    leave(ep);
    return NULL;
}

void plus_ep_release_graphs(plus_ep* ep) {
    if (ep->pending || ep->spare) {
        CUstream stream = NULL;
        OrtStatus* st = enter(ep, &stream);
        if (!st) timings_free(ep), leave(ep);
        plus_ep_drop(st);
    }
    if (!ep->n_graphs) return;
    CUstream stream = NULL;
    OrtStatus* st = enter(ep, &stream);
    if (st) return plus_ep_drop(st);
    if (stream) ep->drv->cuStreamSynchronize(stream);
    while (ep->n_graphs) drop_graph(ep, &ep->graphs[0]);
    leave(ep);
}

void plus_ep_install_run_hooks(plus_ep* ep) {
    ep->base.OnRunStart = on_run_start;
    ep->base.OnRunEnd = on_run_end;
    if (plus_ep_version >= 26) {
        ep->base.IsGraphCaptureEnabled = graph_enabled;
        ep->base.IsGraphCaptured = graph_captured;
        ep->base.ReplayGraph = replay;
        ep->base.GetGraphCaptureNodeAssignmentPolicy = capture_policy;
    }
    if (plus_ep_version >= 27) ep->base.ReleaseCapturedGraph = release_graph;
}
