/* Test harness for the launcher's C internals (driven by tests/native/test_launcher.py).
 *
 *   harness parse PLAN                       parse a plan file; print a summary or "error: ..."
 *   harness eval EXPR [sK=N|vK=N]...         compile + evaluate one expression (all s/v allowed)
 *   harness bind PLAN SPEC...                bind inputs; print route, v, output shapes, scratch, launches
 *                                            (inputs the plan reads with `shapev` are handed over in host memory)
 *   harness infer PLAN SPEC...               shape inference: SPEC "?" (unknown input) or DTYPE:DIMS with
 *                                            dims "-1" unknown, "-1@name" unknown with a symbolic name
 *   harness select ARCH,ARCH,.. MAJOR MINOR  pick an image pack by arch
 *   harness pack FILE                        validate an image pack
 *   harness run PLAN [--pack ARCH=FILE].. [--in SPEC].. [--staged] [--dev D] [--null-stream] [--repeat N]
 *                [--read-shapes]  (shape tensors read as the CUDA twin does: stream sync + device copy)
 *                                            create a kernel, bind, launch through the driver
 *                                            ($PLUS_EP_CUDA_LIBRARY, the stand-in), print outputs
 *   harness time PLAN --pack ARCH=FILE --in SPEC.. --repeat N
 *                                            the launcher's host time per run (bind, and bind + launch through
 *                                            the stand-in), outputs and scratch allocated once (bench/runs/launch_overhead.py)
 *   harness threads PLAN --pack ARCH=FILE THREADS ITERS [--staged]
 *                                            THREADS threads x ITERS runs of fake_add on one kernel
 * SPEC: "-" (absent input) or DTYPE:DIMS[=FILL], DTYPE an ONNX number, DIMS "2x3" ("" = scalar),
 * FILL a number or "iota" (default). Exit status 0 = ok, 1 = the launcher reported an error, 2 = harness
 * failure (a check did not hold). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "driver.h"
#include "kernel.h"
#include "plus_plan.h"
#include "sha256.h"
#include "trust.h"
#include "host_util.h"


/* ---- input specs ---- */
typedef struct {
    plus_tensor_desc d;
    int64_t dims[PLUS_MAX_RANK];
    long long elems;
    void* data;
    size_t bytes;
} tensor;

static void parse_spec(const char* spec, tensor* t) {
    memset(t, 0, sizeof *t);
    t->d.dims = t->dims;
    if (!strcmp(spec, "-")) return;
    t->d.present = 1;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", spec);
    char* fill = strchr(buf, '=');
    if (fill) *fill++ = 0;
    char* colon = strchr(buf, ':');
    CHECK(colon, "bad spec %s", spec);
    *colon = 0;
    t->d.dtype = plus_dtype_from_onnx(atoi(buf));
    t->elems = 1;
    for (char* p = colon + 1; *p;) {
        CHECK(t->d.rank < PLUS_MAX_RANK, "rank");
        t->dims[t->d.rank] = strtoll(p, &p, 10);
        t->elems *= t->dims[t->d.rank++];
        if (*p == 'x') p++;
    }
    long long b = plus_tensor_bytes(t->d.dtype, t->elems);
    t->bytes = b > 0 ? (size_t)b : 0;
    t->data = calloc(1, t->bytes ? t->bytes : 1);
    int iota = !fill || !strcmp(fill, "iota");
    double v = iota ? 0 : atof(fill);
    for (long long i = 0; i < t->elems; i++) {
        double x = iota ? (double)i : v;
        if (t->d.dtype == 1) ((float*)t->data)[i] = (float)x;
        else if (t->d.dtype == 7) ((int64_t*)t->data)[i] = (int64_t)x;
        else if (t->d.dtype == 6) ((int32_t*)t->data)[i] = (int32_t)x;
    }
}

/* FILL for shape tensors: "v:3,7,-1" gives the values one by one. */
static void fill_values(tensor* t, const char* spec) {
    const char* v = strstr(spec, "=v:");
    if (!v) return;
    v += 3;
    for (long long i = 0; i < t->elems && *v; i++) {
        long long x = strtoll(v, (char**)&v, 10);
        if (t->d.dtype == 7) ((int64_t*)t->data)[i] = x;
        else if (t->d.dtype == 6) ((int32_t*)t->data)[i] = (int32_t)x;
        if (*v == ',') v++;
    }
}

/* The plan in file `path` parsed into *p (free it with plus_plan_free): 0, or 1 after printing
 * "error: <the parser's message>". */
static int load_plan(const char* path, plus_plan* p) {
    char* text = slurp(path, NULL);
    char err[PLUS_ERR_LEN];
    int rc = plus_plan_parse(text, p, err, sizeof err);
    free(text);
    if (rc) printf("error: %s\n", err);
    return rc ? 1 : 0;
}

/* ---- commands ---- */
static int cmd_parse(int argc, char** argv) {
    CHECK(argc == 1, "usage: parse PLAN");
    plus_plan p;
    if (load_plan(argv[0], &p)) return 1;
    printf("ok node=%s in=%d out=%d sym=%d val=%d routes=%d kernels=%d archs=", p.node, p.n_in, p.n_out, p.n_sym,
           p.n_val, p.n_routes, p.n_kernels);
    for (int i = 0; i < p.n_archs; i++) printf("%s%s", i ? "," : "", p.arch[i]);
    printf(" scratch=");
    for (int i = 0; i < PLUS_MAX_SCRATCH; i++) printf("%d", p.has_scratch[i]);
    printf("\n");
    for (int i = 0; i < p.n_kernels; i++)
        printf("kernel route=%d image=%d entry=%s line=%d\n", p.kernel[i].route, p.kernel[i].image,
               p.kernel[i].entry, p.kernel[i].line);
    plus_plan_free(&p);
    return 0;
}

static int cmd_eval(int argc, char** argv) {
    CHECK(argc >= 1, "usage: eval EXPR [sK=N|vK=N]...");
    plus_plan p;
    memset(&p, 0, sizeof p);
    plus_env env;
    memset(&env, 0, sizeof env);
    char err[PLUS_ERR_LEN];
    plus_expr e;
    int rc = plus_expr_compile(&p, argv[0], PLUS_MAX_SYM, 0xffffffffu, &e, err, sizeof err);
    if (!rc) {
        for (int i = 1; i < argc; i++) {
            int k = atoi(argv[i] + 1);
            long long v = strtoll(strchr(argv[i], '=') + 1, NULL, 10);
            if (argv[i][0] == 's') env.sym[k] = v, env.bound |= 1u << k;
            else env.v[k] = v;
        }
        int64_t out;
        e.line = 0;
        rc = plus_expr_eval(&p, e, &env, &out, err, sizeof err);
        if (!rc) printf("%" PRId64 "\n", out);
    }
    free(p.items);
    if (rc) printf("error: %s\n", err);
    return rc ? 1 : 0;
}

static void print_binding(const plus_plan* p, const plus_binding* b) {
    printf("route=%d v=", b->route);
    for (int i = 0; i < p->n_val; i++) printf("%s%d:%" PRId64, i ? "," : "", p->val_slot[i], b->env.v[p->val_slot[i]]);
    printf("\n");
    for (int o = 0; o < p->n_out; o++) {
        printf("out%d %s [", o, plus_dtype_name(p->out[o].dtype));
        for (int d = 0; d < p->out[o].rank; d++) printf("%s%" PRId64, d ? "," : "", b->out_dims[o][d]);
        printf("]\n");
    }
    printf("scratch=%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 "\n", b->scratch_bytes[0], b->scratch_bytes[1],
           b->scratch_bytes[2], b->scratch_bytes[3]);
}

static int print_launches(const plus_plan* p, const plus_binding* b) {
    char err[PLUS_ERR_LEN];
    for (int i = 0; i < p->n_kernels; i++) {
        if (p->kernel[i].route != b->route) continue;
        plus_geom g;
        int rc = plus_kernel_geom(p, &p->kernel[i], &b->env, &g, err, sizeof err);
        if (rc < 0) {
            printf("error: %s\n", err);
            return 1;
        }
        printf("launch %s grid=%u,%u,%u block=%u,%u,%u smem=%u%s\n", p->kernel[i].entry, g.grid[0], g.grid[1],
               g.grid[2], g.block[0], g.block[1], g.block[2], g.smem, rc ? " skip" : "");
    }
    return 0;
}

static int cmd_bind(int argc, char** argv) {
    CHECK(argc >= 1, "usage: bind PLAN SPEC...");
    plus_plan p;
    if (load_plan(argv[0], &p)) return 1;
    char err[PLUS_ERR_LEN];
    int n = argc - 1;
    tensor* t = calloc((size_t)n + 1, sizeof *t);
    CHECK(n <= PLUS_MAX_IN, "at most %d inputs", PLUS_MAX_IN);
    plus_tensor_desc d[PLUS_MAX_IN];
    const char* names[PLUS_MAX_IN];
    for (int i = 0; i < n; i++) {
        parse_spec(argv[1 + i], &t[i]);
        fill_values(&t[i], argv[1 + i]);
        d[i] = t[i].d;
        if (plus_plan_input_on_host(&p, i)) d[i].host = t[i].data;
        names[i] = i == 0 ? "X" : "";
    }
    plus_binding b;
    int rc = plus_bind(&p, d, (size_t)n, (size_t)p.n_out, names, &b, err, sizeof err);
    if (rc) printf("error: %s\n", err);
    else {
        print_binding(&p, &b);
        rc = print_launches(&p, &b);
    }
    for (int i = 0; i < n; i++) free(t[i].data);
    free(t);
    plus_plan_free(&p);
    return rc ? 1 : 0;
}

static int cmd_infer(int argc, char** argv) {
    CHECK(argc >= 1 && argc - 1 <= PLUS_MAX_IN, "usage: infer PLAN SPEC...");
    plus_plan p;
    if (load_plan(argv[0], &p)) return 1;
    int n = argc - 1;
    static int64_t dims[PLUS_MAX_IN][PLUS_MAX_RANK];
    static char namebuf[PLUS_MAX_IN][PLUS_MAX_RANK][64];
    static const char* names[PLUS_MAX_IN][PLUS_MAX_RANK];
    plus_infer_input in[PLUS_MAX_IN];
    for (int i = 0; i < n; i++) {
        const char* spec = argv[1 + i];
        in[i] = (plus_infer_input){.known = 0, .dims = dims[i], .names = names[i]};
        if (!strcmp(spec, "?")) continue;
        const char* colon = strchr(spec, ':');
        CHECK(colon, "bad spec %s", spec);
        in[i].known = 1;
        for (const char* q = colon + 1; *q;) {
            int r = in[i].rank++;
            CHECK(r < PLUS_MAX_RANK, "rank");
            dims[i][r] = strtoll(q, (char**)&q, 10);
            names[i][r] = NULL;
            if (*q == '@') {
                size_t len = strcspn(q + 1, "x");
                snprintf(namebuf[i][r], sizeof namebuf[i][r], "%.*s", (int)len, q + 1);
                names[i][r] = namebuf[i][r];
                q += 1 + len;
            }
            if (*q == 'x') q++;
        }
    }
    static plus_infer_output out[PLUS_MAX_OUT];
    plus_infer_outputs(&p, in, (size_t)n, out);
    for (int o = 0; o < p.n_out; o++) {
        printf("out%d %s [", o, plus_dtype_name(out[o].dtype));
        for (int d = 0; d < out[o].rank; d++) {
            if (out[o].dims[d] >= 0) printf("%s%" PRId64, d ? "," : "", out[o].dims[d]);
            else printf("%s%s", d ? "," : "", out[o].names[d]);
        }
        printf("]\n");
    }
    plus_plan_free(&p);
    return 0;
}

static int cmd_select(int argc, char** argv) {
    CHECK(argc == 3, "usage: select ARCHS MAJOR MINOR");
    plus_pack packs[PLUS_MAX_ARCHS];
    int n = 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", argv[0]);
    for (char* a = strtok(buf, ","); a && n < PLUS_MAX_ARCHS; a = strtok(NULL, ","))
        snprintf(packs[n++].arch, PLUS_NAME_LEN, "%s", a);
    char err[PLUS_ERR_LEN];
    int i = plus_pack_select(packs, n, atoi(argv[1]), atoi(argv[2]), err, sizeof err);
    if (i < 0) {
        printf("error: %s\n", err);
        return 1;
    }
    printf("%s\n", packs[i].arch);
    return 0;
}

static int cmd_pack(int argc, char** argv) {
    CHECK(argc == 1, "usage: pack FILE");
    size_t n;
    char* data = slurp(argv[0], &n);
    plus_pack p;
    memset(&p, 0, sizeof p);
    snprintf(p.arch, sizeof p.arch, "sm_test");
    char err[PLUS_ERR_LEN];
    int rc = plus_pack_parse((const uint8_t*)data, n, &p, err, sizeof err);
    if (rc) printf("error: %s\n", err);
    else {
        printf("ok count=%u sizes=", p.count);
        for (uint32_t i = 0; i < p.count; i++) {
            const uint8_t* img;
            size_t sz;
            plus_pack_image(&p, i, &img, &sz);
            printf("%s%zu", i ? "," : "", sz);
        }
        printf("\n");
    }
    free(data);
    return rc ? 1 : 0;
}

/* ---- the stand-in driver's test hooks ---- */
typedef struct {
    void* (*stream)(int);
    long (*count)(const char*);
    void (*last_args)(PlusArgs*);
} fake_hooks;

static const plus_driver* driver(fake_hooks* h) {
    const char* why = NULL;
    const plus_driver* d = plus_driver_get(&why);
    if (!d) {
        printf("error: %s\n", why);
        exit(1);
    }
    void* lib = dlopen(getenv("PLUS_EP_CUDA_LIBRARY"), RTLD_NOW | RTLD_NOLOAD);
    CHECK(lib, "the stand-in driver is not loaded");
    *(void**)&h->stream = dlsym(lib, "fake_cuda_stream");
    *(void**)&h->count = dlsym(lib, "fake_cuda_count");
    *(void**)&h->last_args = dlsym(lib, "fake_cuda_last_args");
    CHECK(h->stream && h->count && h->last_args, "stand-in hooks missing");
    dlclose(lib);
    return d;
}

typedef struct {
    const char* plan;
    plus_pack_src packs[PLUS_MAX_ARCHS];
    char* pack_mem[PLUS_MAX_ARCHS];
    int n_packs;
    tensor in[PLUS_MAX_IN];
    int n_in, staged, dev, null_stream, repeat, read_shapes;
} run_opts;

static void add_pack(run_opts* o, const char* arg) {
    const char* eq = strchr(arg, '=');
    CHECK(eq && o->n_packs < PLUS_MAX_ARCHS, "bad --pack %s", arg);
    size_t n;
    char* arch = strndup(arg, (size_t)(eq - arg));
    o->pack_mem[o->n_packs] = slurp(eq + 1, &n);
    o->packs[o->n_packs].arch = arch;
    o->packs[o->n_packs].data = (const uint8_t*)o->pack_mem[o->n_packs];
    o->packs[o->n_packs].size = n;
    o->n_packs++;
}

static plus_kernel* make_kernel(const run_opts* o) {
    char* text = slurp(o->plan, NULL);
    const char* names[PLUS_MAX_IN] = {"X", "Y"};
    for (int i = 2; i < PLUS_MAX_IN; i++) names[i] = "";
    plus_kernel* k = NULL;
    char err[PLUS_ERR_LEN];
    int rc = plus_kernel_create(NULL, text, o->packs, o->n_packs, names, PLUS_MAX_IN, &k, err, sizeof err);
    free(text);
    if (rc) {
        printf("error: %s\n", err);
        return NULL;
    }
    return k;
}

/* One run: bind, allocate outputs and scratch (host memory stands for device memory), launch. */
static int run_once(plus_kernel* k, const plus_driver* d, const fake_hooks* h, const run_opts* o, tensor* in,
                    int n_in, void** outs, size_t* out_bytes, int verbose, char* err, size_t errlen) {
    const plus_plan* p = plus_kernel_plan(k);
    plus_tensor_desc desc[PLUS_MAX_IN];
    const void* dev[PLUS_MAX_IN];
    for (int i = 0; i < n_in; i++) {
        desc[i] = in[i].d;
        dev[i] = in[i].d.present ? in[i].data : NULL;
        /* host memory stands for both; --read-shapes copies them as the CUDA twin does */
        if (plus_plan_input_on_host(p, i) && !o->read_shapes) desc[i].host = in[i].data;
    }
    plus_host_values hv;
    if (o->read_shapes && plus_kernel_read_shape_inputs(k, d, NULL, (CUstream)h->stream(o->dev), desc, dev, (size_t)n_in, &hv,
                                                         err, errlen))
        return 1;
    plus_binding b;
    if (plus_kernel_bind(k, desc, (size_t)n_in, (size_t)p->n_out, &b, err, errlen)) return 1;
    if (verbose) print_binding(p, &b);
    PlusArgs args;
    memset(&args, 0, sizeof args);
    for (int o2 = 0; o2 < p->n_out; o2++) {
        long long elems = 1;
        for (int dd = 0; dd < p->out[o2].rank; dd++) elems *= b.out_dims[o2][dd];
        out_bytes[o2] = (size_t)plus_tensor_bytes(p->out[o2].dtype, elems);
        outs[o2] = calloc(1, out_bytes[o2] ? out_bytes[o2] : 1);
        args.out[o2] = outs[o2];
    }
    int rc;
    if (o->staged) {
        plus_host_in hin[PLUS_MAX_IN];
        plus_host_out hout[PLUS_MAX_OUT];
        for (int i = 0; i < n_in; i++) hin[i].host = in[i].data, hin[i].bytes = in[i].d.present ? in[i].bytes : 0;
        for (int o2 = 0; o2 < p->n_out; o2++) hout[o2].host = outs[o2], hout[o2].bytes = out_bytes[o2];
        rc = plus_kernel_run_staged(k, d, hin, (size_t)n_in, hout, (size_t)p->n_out, &b, err, errlen);
    } else {
        for (int i = 0; i < n_in; i++) args.in[i] = in[i].d.present ? in[i].data : NULL;
        for (int s = 0; s < PLUS_MAX_SCRATCH; s++)
            if (b.scratch_bytes[s]) args.scratch[s] = malloc((size_t)b.scratch_bytes[s]);
        CUcontext pushed = NULL;
        if (o->null_stream) {
            CUdevice dev;
            CHECK(!d->cuDeviceGet(&dev, o->dev) && !d->cuDevicePrimaryCtxRetain(&pushed, dev), "primary ctx");
            CHECK(!d->cuCtxPushCurrent(pushed), "push");
        }
        PlusArgs sent = args;
        rc = plus_kernel_launch(k, d, NULL, o->null_stream ? NULL : (CUstream)h->stream(o->dev), &b, &args, err, errlen);
        if (o->null_stream) d->cuCtxPopCurrent(&pushed);
        if (!rc && verbose && h->count("launch") > 0) {   /* marshalling: what the kernel saw */
            PlusArgs seen;
            h->last_args(&seen);
            memcpy(sent.v, b.env.v, sizeof sent.v);
            CHECK(!memcmp(&seen, &sent, sizeof seen), "PlusArgs passed to the kernel differ from the binding");
            printf("marshal ok\n");
        }
        for (int s = 0; s < PLUS_MAX_SCRATCH; s++) free(args.scratch[s]);
    }
    return rc;
}

static void print_outputs(const plus_plan* p, void** outs, size_t* out_bytes) {
    for (int o = 0; o < p->n_out; o++) {
        printf("value%d", o);
        if (p->out[o].dtype == 1)
            for (size_t i = 0; i < out_bytes[o] / 4 && i < 16; i++) printf(" %g", (double)((float*)outs[o])[i]);
        printf("\n");
    }
}

static int parse_run_opts(int argc, char** argv, run_opts* o, int positional_max, char** pos) {
    memset(o, 0, sizeof *o);
    o->repeat = 1;
    int np = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--pack") && i + 1 < argc) add_pack(o, argv[++i]);
        else if (!strcmp(argv[i], "--in") && i + 1 < argc) {
            CHECK(o->n_in < PLUS_MAX_IN, "too many inputs");
            parse_spec(argv[++i], &o->in[o->n_in]);
            fill_values(&o->in[o->n_in++], argv[i]);
        } else if (!strcmp(argv[i], "--staged")) o->staged = 1;
        else if (!strcmp(argv[i], "--null-stream")) o->null_stream = 1;
        else if (!strcmp(argv[i], "--read-shapes")) o->read_shapes = 1;
        else if (!strcmp(argv[i], "--dev") && i + 1 < argc) o->dev = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) o->repeat = atoi(argv[++i]);
        else {
            CHECK(np < positional_max, "unexpected argument %s", argv[i]);
            pos[np++] = argv[i];
        }
    }
    return np;
}

static void free_run_opts(run_opts* o) {
    for (int i = 0; i < o->n_packs; i++) free(o->pack_mem[i]), free((char*)o->packs[i].arch);
    for (int i = 0; i < o->n_in; i++) free(o->in[i].data);
}

/* The options of `run` / `time` (one positional: the plan) and the kernel made from them; NULL when the
 * launcher refuses the plan (its options are freed then). */
static plus_kernel* open_plan_kernel(int argc, char** argv, run_opts* o, const char* usage) {
    char* pos[1];
    CHECK(parse_run_opts(argc, argv, o, 1, pos) == 1, "%s", usage);
    o->plan = pos[0];
    plus_kernel* k = make_kernel(o);
    if (!k) free_run_opts(o);
    return k;
}

static int cmd_run(int argc, char** argv) {
    run_opts o;
    fake_hooks h;
    const plus_driver* d = driver(&h);
    plus_kernel* k = open_plan_kernel(argc, argv, &o, "usage: run PLAN ...");
    if (!k) return 1;
    const plus_plan* p = plus_kernel_plan(k);
    char err[PLUS_ERR_LEN];
    int rc = 0;
    for (int r = 0; r < o.repeat && !rc; r++) {
        void* outs[PLUS_MAX_OUT] = {0};
        size_t out_bytes[PLUS_MAX_OUT] = {0};
        rc = run_once(k, d, &h, &o, o.in, o.n_in, outs, out_bytes, r == 0, err, sizeof err);
        if (!rc && r == 0) print_outputs(p, outs, out_bytes);
        for (int i = 0; i < PLUS_MAX_OUT; i++) free(outs[i]);
    }
    if (rc) printf("error: %s\n", err);
    plus_kernel_destroy(k);
    printf("counts launch=%ld load=%ld unload=%ld sync=%ld attr=%ld live_allocs=%ld\n", h.count("launch"),
           h.count("load"), h.count("unload"), h.count("sync"), h.count("attr"), h.count("alloc"));
    free_run_opts(&o);
    return rc ? 1 : 0;
}

/* ---- time: the launcher's host cost per run (bind + launch), outputs and scratch allocated once; this
 * thread's CPU time, so that other work on a shared machine does not count ---- */
static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmd_time(int argc, char** argv) {
    run_opts o;
    fake_hooks h;
    const plus_driver* d = driver(&h);
    plus_kernel* k = open_plan_kernel(argc, argv, &o, "usage: time PLAN --pack A=F --in SPEC.. --repeat N");
    if (!k) return 1;
    const plus_plan* p = plus_kernel_plan(k);
    char err[PLUS_ERR_LEN];
    plus_tensor_desc desc[PLUS_MAX_IN];
    for (int i = 0; i < o.n_in; i++) {
        desc[i] = o.in[i].d;
        if (plus_plan_input_on_host(p, i)) desc[i].host = o.in[i].data;
    }
    plus_binding b;
    CHECK(!plus_kernel_bind(k, desc, (size_t)o.n_in, (size_t)p->n_out, &b, err, sizeof err), "bind: %s", err);
    PlusArgs args;
    memset(&args, 0, sizeof args);
    for (int i = 0; i < o.n_in; i++) args.in[i] = o.in[i].d.present ? o.in[i].data : NULL;
    for (int o2 = 0; o2 < p->n_out; o2++) {
        long long elems = 1;
        for (int dd = 0; dd < p->out[o2].rank; dd++) elems *= b.out_dims[o2][dd];
        args.out[o2] = calloc(1, (size_t)plus_tensor_bytes(p->out[o2].dtype, elems) + 1);
    }
    for (int s = 0; s < PLUS_MAX_SCRATCH; s++)
        if (b.scratch_bytes[s]) args.scratch[s] = malloc((size_t)b.scratch_bytes[s]);
    CUstream st = (CUstream)h.stream(o.dev);
    long before = h.count("launch");
    CHECK(!plus_kernel_launch(k, d, NULL, st, &b, &args, err, sizeof err), "launch: %s", err);   /* loads images */
    long per_run = h.count("launch") - before;
    double t0 = now_ns();
    for (int r = 0; r < o.repeat; r++)
        CHECK(!plus_kernel_bind(k, desc, (size_t)o.n_in, (size_t)p->n_out, &b, err, sizeof err), "bind: %s", err);
    double t1 = now_ns();
    for (int r = 0; r < o.repeat; r++) {
        CHECK(!plus_kernel_bind(k, desc, (size_t)o.n_in, (size_t)p->n_out, &b, err, sizeof err), "bind: %s", err);
        CHECK(!plus_kernel_launch(k, d, NULL, st, &b, &args, err, sizeof err), "launch: %s", err);
    }
    double t2 = now_ns();
    printf("runs=%d launches_per_run=%ld bind_ns=%.1f bind_launch_ns=%.1f\n", o.repeat, per_run,
           (t1 - t0) / o.repeat, (t2 - t1) / o.repeat);
    for (int o2 = 0; o2 < p->n_out; o2++) free(args.out[o2]);
    for (int s = 0; s < PLUS_MAX_SCRATCH; s++) free(args.scratch[s]);
    plus_kernel_destroy(k);
    free_run_opts(&o);
    return 0;
}

/* ---- threads ---- */
typedef struct {
    plus_kernel* k;
    const plus_driver* d;
    const fake_hooks* h;
    const run_opts* o;
    int tid, iters, failures;
    char err[PLUS_ERR_LEN];
} thread_arg;

static void* worker(void* p) {
    thread_arg* a = p;
    for (int it = 0; it < a->iters; it++) {
        int n = 1 + (a->tid * 7 + it) % 97;   /* sizes differ per thread and run */
        char sx[64], sy[64];
        snprintf(sx, sizeof sx, "1:%d=%d", n, a->tid);
        snprintf(sy, sizeof sy, "1:%d", n);
        tensor in[2];
        parse_spec(sx, &in[0]);
        parse_spec(sy, &in[1]);
        void* outs[PLUS_MAX_OUT] = {0};
        size_t ob[PLUS_MAX_OUT] = {0};
        if (run_once(a->k, a->d, a->h, a->o, in, 2, outs, ob, 0, a->err, sizeof a->err)) a->failures++;
        else
            for (int i = 0; i < n; i++)
                if (((float*)outs[0])[i] != (float)(a->tid + i)) {
                    snprintf(a->err, sizeof a->err, "thread %d run %d: out[%d] = %g, expected %d", a->tid, it, i,
                             (double)((float*)outs[0])[i], a->tid + i);
                    a->failures++;
                    break;
                }
        free(outs[0]);
        free(in[0].data);
        free(in[1].data);
    }
    return NULL;
}

static int cmd_threads(int argc, char** argv) {
    run_opts o;
    char* pos[3];
    CHECK(parse_run_opts(argc, argv, &o, 3, pos) == 3, "usage: threads PLAN --pack A=F THREADS ITERS");
    o.plan = pos[0];
    int nt = atoi(pos[1]), iters = atoi(pos[2]);
    fake_hooks h;
    const plus_driver* d = driver(&h);
    plus_kernel* k = make_kernel(&o);
    if (!k) return free_run_opts(&o), 1;
    pthread_t th[64];
    thread_arg args[64];
    CHECK(nt <= 64, "at most 64 threads");
    for (int i = 0; i < nt; i++) {
        args[i] = (thread_arg){.k = k, .d = d, .h = &h, .o = &o, .tid = i, .iters = iters};
        CHECK(!pthread_create(&th[i], NULL, worker, &args[i]), "pthread_create");
    }
    int failures = 0;
    for (int i = 0; i < nt; i++) {
        pthread_join(th[i], NULL);
        if (args[i].failures) printf("thread %d: %d failures, last: %s\n", i, args[i].failures, args[i].err);
        failures += args[i].failures;
    }
    long loads = h.count("load");
    plus_kernel_destroy(k);
    printf("threads=%d iters=%d failures=%d launches=%ld loads=%ld unloads=%ld live_allocs=%ld\n", nt, iters, failures,
           h.count("launch"), loads, h.count("unload"), h.count("alloc"));
    free_run_opts(&o);
    return failures ? 2 : 0;
}

/* trust DESC [--sig TEXT] [--any] [--cache-dir D]: the node digest of the node DESC describes, then how
 * the policy treats it ("trusted manifest|signed|optout", "warning: ...") or "error: ...". DESC lines:
 * `domain X`, `op X`, `name X` (the rest of the line), `in 1 0 1` / `out 1` (wired flags), `str NAME FILE`
 * (a STRING attribute of trust.h's list), `pack ARCH FILE`, `attr NAME` (every attribute name, as the
 * plugin EP lists them; none: the custom op's view), `unlisted ARCH` (a pack the custom op found unlisted). */
static int cmd_trust(int argc, char** argv) {
    CHECK(argc >= 1, "usage: trust DESC [--sig TEXT] [--any] [--cache-dir D]");
    char* desc = slurp(argv[0], NULL);
    plus_trust_node nd = {0};
    char* fields[3] = {0};   /* domain, op, name */
    const char* ins[64];
    const char* outs[64];
    char* strs[PLUS_TRUST_N_STRINGS] = {0};
    plus_pack_src packs[PLUS_MAX_ARCHS];
    char* blobs[PLUS_MAX_ARCHS];
    char* archs[PLUS_MAX_ARCHS];
    const char* names[64];
    char* unlisted = NULL;
    int n_packs = 0;
    size_t n_names = 0;
    int have_attrs = 0;
    for (char* save = NULL, *line = strtok_r(desc, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char* rest = strchr(line, ' ');
        rest = rest ? (*rest = 0, rest + 1) : line + strlen(line);
        if (!strcmp(line, "domain")) fields[0] = rest;
        else if (!strcmp(line, "op")) fields[1] = rest;
        else if (!strcmp(line, "name")) fields[2] = rest;
        else if (!strcmp(line, "in") || !strcmp(line, "out")) {
            const char** v = line[0] == 'i' ? ins : outs;
            size_t* c = line[0] == 'i' ? &nd.n_in : &nd.n_out;
            for (char* p = rest; *p; p++)
                if (*p == '0' || *p == '1') {
                    CHECK(*c < 64, "too many");
                    v[(*c)++] = *p == '1' ? "x" : "";
                }
        } else if (!strcmp(line, "str")) {
            char* file = strchr(rest, ' ');
            CHECK(file, "str NAME FILE");
            *file++ = 0;
            int k = 0;
            while (k < PLUS_TRUST_N_STRINGS && strcmp(plus_trust_strings[k], rest)) k++;
            CHECK(k < PLUS_TRUST_N_STRINGS, "unknown string attribute %s", rest);
            strs[k] = slurp(file, &nd.str_len[k]);
            nd.str[k] = strs[k];
        } else if (!strcmp(line, "pack")) {
            char* file = strchr(rest, ' ');
            CHECK(file && n_packs < PLUS_MAX_ARCHS, "pack ARCH FILE");
            *file++ = 0;
            size_t len;
            blobs[n_packs] = slurp(file, &len);
            archs[n_packs] = rest;
            packs[n_packs] = (plus_pack_src){.arch = rest, .data = (const uint8_t*)blobs[n_packs], .size = len};
            n_packs++;
        } else if (!strcmp(line, "attr")) {
            CHECK(n_names < 64, "too many attrs");
            names[n_names++] = rest, have_attrs = 1;
        } else if (!strcmp(line, "unlisted")) {
            unlisted = rest;
        } else {
            CHECK(0, "unknown description line %s", line);
        }
    }
    (void)archs;
    nd.domain = fields[0], nd.op_type = fields[1], nd.name = fields[2];
    nd.in_names = ins, nd.out_names = outs, nd.packs = packs, nd.n_packs = n_packs;
    nd.attr_names = have_attrs ? names : NULL, nd.n_attr_names = n_names, nd.unlisted_pack = unlisted;
    const char* sig = NULL;
    plus_trust_opts o = {.any = 0, .any_source = "harness option --any", .cache_dir = NULL};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--sig") && i + 1 < argc) sig = argv[++i];
        else if (!strcmp(argv[i], "--any")) o.any = 1;
        else if (!strcmp(argv[i], "--cache-dir") && i + 1 < argc) o.cache_dir = argv[++i];
        else CHECK(0, "unknown option %s", argv[i]);
    }
    uint8_t d[32];
    char hex[65], err[PLUS_ERR_LEN], warning[PLUS_ERR_LEN];
    if (plus_trust_node_digest(&nd, d, err, sizeof err)) printf("no digest: %s\n", err);
    else plus_sha256_hex(d, hex), printf("digest %s\n", hex);
    int rc = plus_trust_check(&nd, sig, &o, warning, sizeof warning, err, sizeof err);
    if (warning[0]) printf("warning: %s\n", warning);
    if (rc > 0) printf("trusted %s\n", rc == PLUS_TRUST_MANIFEST ? "manifest" : rc == PLUS_TRUST_SIGNED ? "signed" : "optout");
    else printf("error: %s\n", err);
    for (int i = 0; i < n_packs; i++) free(blobs[i]);
    for (int i = 0; i < PLUS_TRUST_N_STRINGS; i++) free(strs[i]);
    free(desc);
    return rc > 0 ? 0 : 1;
}

/* keys FILE: the key ids of a PLUS_EP_TRUSTED_KEYS file (read as the launcher reads it), or "error: ...". */
static int cmd_keys(int argc, char** argv) {
    CHECK(argc == 1, "usage: keys FILE");
    plus_trust_key keys[PLUS_TRUST_MAX_KEYS];
    char err[PLUS_ERR_LEN];
    int n = plus_trust_read_keys(argv[0], keys, PLUS_TRUST_MAX_KEYS, err, sizeof err);
    if (n < 0) return printf("error: %s\n", err), 1;
    for (int i = 0; i < n; i++) printf("%s\n", keys[i].id);
    return 0;
}

/* policy [VALUE]: how PLUS_EP_TRUST=VALUE reads (no VALUE: unset): "verify", "any" or "error: ...". */
static int cmd_policy(int argc, char** argv) {
    char err[PLUS_ERR_LEN];
    int p = plus_trust_policy(argc ? argv[0] : NULL, err, sizeof err);
    if (p < 0) return printf("error: %s\n", err), 1;
    printf("%s\n", p ? "any" : "verify");
    return 0;
}

/* safe WHAT PATH: "ok", or "error: ..." when PATH breaks the folder rule (plus_trust_safe_path). */
static int cmd_safe(int argc, char** argv) {
    CHECK(argc == 2, "usage: safe WHAT PATH");
    char err[PLUS_ERR_LEN];
    if (plus_trust_safe_path(argv[0], argv[1], err, sizeof err)) return printf("error: %s\n", err), 1;
    printf("ok\n");
    return 0;
}

int main(int argc, char** argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    CHECK(argc >= 2, "usage: harness COMMAND ...");
    const char* c = argv[1];
    if (!strcmp(c, "parse")) return cmd_parse(argc - 2, argv + 2);
    if (!strcmp(c, "eval")) return cmd_eval(argc - 2, argv + 2);
    if (!strcmp(c, "bind")) return cmd_bind(argc - 2, argv + 2);
    if (!strcmp(c, "infer")) return cmd_infer(argc - 2, argv + 2);
    if (!strcmp(c, "select")) return cmd_select(argc - 2, argv + 2);
    if (!strcmp(c, "pack")) return cmd_pack(argc - 2, argv + 2);
    if (!strcmp(c, "run")) return cmd_run(argc - 2, argv + 2);
    if (!strcmp(c, "threads")) return cmd_threads(argc - 2, argv + 2);
    if (!strcmp(c, "trust")) return cmd_trust(argc - 2, argv + 2);
    if (!strcmp(c, "keys")) return cmd_keys(argc - 2, argv + 2);
    if (!strcmp(c, "policy")) return cmd_policy(argc - 2, argv + 2);
    if (!strcmp(c, "safe")) return cmd_safe(argc - 2, argv + 2);
    if (!strcmp(c, "time")) return cmd_time(argc - 2, argv + 2);
    CHECK(0, "unknown command %s", c);
}
