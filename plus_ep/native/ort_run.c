/* One run of a fused node inside ONNX Runtime (ort_run.h): the sequence both front ends share. */
#define _POSIX_C_SOURCE 200809L
#include "ort_run.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ort_tensor.h"

OrtStatus* plus_run_status(const plus_run* r, int code, const char* fmt, ...) {
    char msg[PLUS_ERR_LEN];
    int n = snprintf(msg, sizeof msg, "PlusEP node '%s': ", plus_kernel_node(r->k));
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < sizeof msg) vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    return ORT_CALL(r->api, CreateStatus)(code, msg);
}

/* A status ORT returned, wrapped with the node and what was being done; releases the original. */
static OrtStatus* wrap(const plus_run* r, OrtStatus* st, const char* what) {
    OrtStatus* out = plus_run_status(r, ORT_FAIL, "%s: %s", what, ORT_CALL(r->api, GetErrorMessage)(st));
    ORT_CALL(r->api, ReleaseStatus)(st);
    return out;
}

/* Type, shape and data of one OrtValue (no heap memory of ours). */
static OrtStatus* describe(const plus_run* r, const OrtValue* v, int* dtype, int* rank, int64_t* dims,
                           long long* elems, void** data, const char* what) {
    int too_deep = 0;
    OrtStatus* st = plus_ort_describe(r->api, v, dtype, rank, dims, elems, data, &too_deep);
    if (too_deep) return plus_run_status(r, ORT_INVALID_ARGUMENT, "%s has rank above the launcher's limit of %d", what,
                                         PLUS_MAX_RANK);
    if (st) return wrap(r, st, what);
    return NULL;
}

/* Inputs: the context's tensors in plan order (absent: wired "" or not handed over). */
static OrtStatus* gather(plus_run* r) {
    const plus_plan* plan = plus_kernel_plan(r->k);
    OrtStatus* st;
    size_t n_in = 0, n_out = 0;
    r->n_in = plan->n_in;
    r->n_out = plan->n_out;
    if ((!r->in_map || !r->out_map) && !r->hooks->get_input) {   /* plan index == context index: the counts agree */
        st = ORT_CALL(r->api, KernelContext_GetInputCount)(r->kctx, &n_in);
        if (!st) st = ORT_CALL(r->api, KernelContext_GetOutputCount)(r->kctx, &n_out);
        if (st) return wrap(r, st, "reading the input/output count");
        if ((!r->in_map && n_in != (size_t)plan->n_in) || (!r->out_map && n_out != (size_t)plan->n_out))
            return plus_run_status(r, ORT_INVALID_ARGUMENT, "the node has %zu inputs and %zu outputs, its plan declares "
                                   "%d and %d", n_in, n_out, plan->n_in, plan->n_out);
    }
    for (int i = 0; i < r->n_in; i++) {
        const OrtValue* v = NULL;
        int idx = r->in_map ? r->in_map[i] : i;
        if (r->hooks->get_input) {
            if ((st = r->hooks->get_input(r, i, &v))) return st;
        } else if (idx >= 0 && (st = ORT_CALL(r->api, KernelContext_GetInput)(r->kctx, (size_t)idx, &v))) {
            return wrap(r, st, "KernelContext_GetInput");
        }
        plus_tensor_desc* d = &r->desc[i];
        *d = (plus_tensor_desc){.present = v != NULL, .dims = r->dims[i]};
        r->data[i] = NULL;
        r->elems[i] = 0;
        r->value[i] = v;
        if (!v) continue;
        if ((st = describe(r, v, &d->dtype, &d->rank, r->dims[i], &r->elems[i], &r->data[i], "reading an input")))
            return st;
        const char* bad = plus_ort_tensor_problem(d->dtype, d->rank, r->dims[i], r->elems[i], r->data[i], -1, NULL);
        if (bad) return plus_run_status(r, ORT_INVALID_ARGUMENT, "input %d cannot go to a kernel: %s", i, bad);
    }
    return NULL;
}

/* Outputs: ORT's tensor of the bound shape, or (nobody consumes it) a temporary of its size. */
static OrtStatus* outputs(plus_run* r, const plus_binding* b, void** data, size_t* bytes, int* temp) {
    const plus_plan* plan = plus_kernel_plan(r->k);
    for (int o = 0; o < r->n_out; o++) {
        long long n = plus_tensor_bytes(plan->out[o].dtype, b->out_elems[o]);
        if (n < 0)
            return plus_run_status(r, ORT_INVALID_ARGUMENT, "output %d of the plan's shape has more bytes than fit in "
                                   "int64 (plan line %d)", o, plan->out[o].line);
        bytes[o] = (size_t)n;
        int idx = r->out_map ? r->out_map[o] : o;
        OrtValue* v = NULL;
        if (r->hooks->get_output) {
            OrtStatus* st = r->hooks->get_output(r, o, plan->out[o].dtype, b->out_dims[o], plan->out[o].rank, &v);
            if (st) return wrap(r, st, "allocating an output");
        } else if (idx >= 0) {
            OrtStatus* st = ORT_CALL(r->api, KernelContext_GetOutput)(r->kctx, (size_t)idx, b->out_dims[o],
                                                                     (size_t)plan->out[o].rank, &v);
            if (st) return wrap(r, st, "allocating an output (KernelContext_GetOutput)");
        }
        if (!v) {   /* wired "" (checked `optional` at session creation) or dropped by ORT: a temporary */
            temp[o] = 1;
            continue;
        }
        int dtype, rank;
        int64_t dims[PLUS_MAX_RANK];
        long long elems;
        OrtStatus* st = describe(r, v, &dtype, &rank, dims, &elems, &data[o], "reading an output");
        if (st) return st;
        if (dtype != plan->out[o].dtype)
            return plus_run_status(r, ORT_FAIL, "output %d is %s in the graph but %s in the plan (line %d)", o,
                                   plus_dtype_name(dtype), plus_dtype_name(plan->out[o].dtype), plan->out[o].line);
        const char* bad = plus_ort_tensor_problem(dtype, rank, dims, elems, data[o], plan->out[o].rank, b->out_dims[o]);
        if (bad) return plus_run_status(r, ORT_FAIL, "output %d cannot go to a kernel: %s", o, bad);
        if (r->hooks->check_output && (st = r->hooks->check_output(r, o, v))) return st;
    }
    return NULL;
}

/* Host staging: temporaries are host memory here. */
static OrtStatus* run_staged(plus_run* r, const plus_binding* b, void** data, const size_t* bytes, const int* temp) {
    plus_host_in hin[PLUS_MAX_IN];
    plus_host_out hout[PLUS_MAX_OUT];
    char err[PLUS_ERR_LEN];
    for (int i = 0; i < r->n_in; i++) {
        long long n = r->desc[i].present ? plus_tensor_bytes(r->desc[i].dtype, r->elems[i]) : 0;
        if (n < 0) return plus_run_status(r, ORT_INVALID_ARGUMENT, "input %d's element type cannot be staged", i);
        hin[i] = (plus_host_in){r->data[i], (size_t)n};
    }
    int rc = 0;
    for (int o = 0; o < r->n_out; o++) {
        if (temp[o] && bytes[o] && !(data[o] = malloc(bytes[o]))) rc = -1;
        hout[o] = (plus_host_out){data[o], bytes[o]};
    }
    if (rc) snprintf(err, sizeof err, "PlusEP node '%s': out of memory", plus_kernel_node(r->k));
    else rc = plus_kernel_run_staged(r->k, r->drv, hin, (size_t)r->n_in, hout, (size_t)r->n_out, b, err, sizeof err);
    for (int o = 0; o < r->n_out; o++)
        if (temp[o]) free(data[o]), data[o] = NULL;
    return rc ? ORT_CALL(r->api, CreateStatus)(ORT_FAIL, err) : NULL;
}

/* Device tensors: temporaries from the front end, the launch on its stream. */
static OrtStatus* run_device(plus_run* r, const plus_binding* b, void** data, const size_t* bytes, const int* temp) {
    PlusArgs args;
    char err[PLUS_ERR_LEN];
    void* tmp[PLUS_MAX_OUT + PLUS_MAX_SCRATCH] = {0};
    int rc = 0;
    memset(&args, 0, sizeof args);
    for (int i = 0; i < r->n_in; i++) args.in[i] = r->data[i];
    for (int o = 0; o < r->n_out && !rc; o++) {
        if (temp[o] && bytes[o]) rc = r->hooks->temp_alloc(r, bytes[o], &tmp[o], err, sizeof err);
        args.out[o] = temp[o] ? tmp[o] : data[o];
    }
    for (int s = 0; s < PLUS_MAX_SCRATCH && !rc; s++) {
        if (!b->scratch_bytes[s]) continue;
        rc = r->hooks->temp_alloc(r, (size_t)b->scratch_bytes[s], &tmp[PLUS_MAX_OUT + s], err, sizeof err);
        args.scratch[s] = tmp[PLUS_MAX_OUT + s];
    }
    if (!rc && r->hooks->launch_begin) r->hooks->launch_begin(r);
    if (!rc) rc = plus_kernel_launch(r->k, r->drv, r->ctx, r->stream, b, &args, err, sizeof err);
    for (size_t t = 0; t < sizeof tmp / sizeof *tmp; t++)
        if (tmp[t]) r->hooks->temp_free(r, tmp[t]);
    return rc ? ORT_CALL(r->api, CreateStatus)(ORT_FAIL, err) : NULL;
}

OrtStatus* plus_run_node(plus_run* r) {
    OrtStatus* st = gather(r);
    if (st) return st;
    if (r->hooks->prepare && (st = r->hooks->prepare(r))) {
        if (r->hooks->finish) r->hooks->finish(r, 0);
        return st;
    }
    plus_binding b;
    char err[PLUS_ERR_LEN];
    void* data[PLUS_MAX_OUT] = {0};
    size_t bytes[PLUS_MAX_OUT] = {0};
    int temp[PLUS_MAX_OUT] = {0};
    if (plus_kernel_bind(r->k, r->desc, (size_t)r->n_in, (size_t)r->n_out, &b, err, sizeof err))
        st = ORT_CALL(r->api, CreateStatus)(ORT_INVALID_ARGUMENT, err);
    if (!st) st = outputs(r, &b, data, bytes, temp);
    if (!st && !b.empty) st = r->staged ? run_staged(r, &b, data, bytes, temp) : run_device(r, &b, data, bytes, temp);
    if (r->hooks->finish) r->hooks->finish(r, !st);
    return st;
}
