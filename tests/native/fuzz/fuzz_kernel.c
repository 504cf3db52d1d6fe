/* libFuzzer entry point `kernel`: the launcher's kernel object (kernel.c) over the parsers: a plan and
 * image packs -> plus_kernel_create (image indices against the packs, route groups against the archs),
 * a run's inputs -> plus_kernel_bind, shape tensors read back from "device" memory
 * (plus_kernel_read_shape_inputs), then plus_kernel_launch and host staging (plus_kernel_run_staged)
 * against the fuzzers' stand-in driver (fuzz_driver.c: device memory is heap memory of exactly the
 * requested size, so a copy of the wrong length is an AddressSanitizer report). Kernels themselves do not run: what a kernel does
 * with its arguments is the trust policy's business, not the parsers'.
 * Input: plan text NUL, a pack count byte, per pack an arch name NUL + uint16 LE length + bytes, a
 * byte choosing the device's compute capability, then the run's inputs (fz_make_inputs). */
#define _GNU_SOURCE
#include <stdio.h>

#include "kernel.h"
#include "fuzz_util.h"
#include "fuzz_driver.h"

static const plus_driver* g_drv;
static int g_stream_obj;   /* a stream handle: the stand-in maps every stream to its one context */
static void (*g_set_cc)(int);
static long (*g_live)(void);

int LLVMFuzzerInitialize(int* argc, char*** argv) {
    (void)argc, (void)argv;
    const char* why = NULL;
    g_drv = fuzz_load_driver(&why, &g_set_cc, &g_live);
    if (!g_drv) {
        fprintf(stderr, "fuzz_kernel: %s\n", why);
        abort();
    }
    return 0;
}

static const int CCS[] = {75, 80, 86, 89, 90, 100, 120};

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fz_in in = {data, size};
    char* text = fz_cstr(&in);
    fz_packs pk;
    fz_read_packs(&in, &pk);
    g_set_cc(CCS[fz_u8(&in) % (sizeof CCS / sizeof CCS[0])]);
    plus_kernel* k = NULL;
    char err[PLUS_ERR_LEN];
    const char* names[] = {"a", "b", "c"};
    int rc = plus_kernel_create(pk.n & 1 ? "node" : NULL, text, pk.src, pk.n, names, 3, &k, err, sizeof err);
    fz_free_packs(&pk);   /* the kernel keeps its own copies */
    free(text);
    if (rc) {
        if (k || !memchr(err, 0, sizeof err)) abort();
        return 0;
    }
    const plus_plan* p = plus_kernel_plan(k);
    fz_tensors t;
    fz_make_inputs(&in, p, &t);
    uint8_t mode = fz_u8(&in);
    /* shape tensors arriving in device memory: the launcher copies what the plan reads */
    plus_host_values hv;
    const void* dev[PLUS_MAX_IN + 1];
    for (size_t i = 0; i < t.n; i++) dev[i] = t.data[i];
    CUstream stream = mode & 1 ? (CUstream)&g_stream_obj : NULL;
    if (!plus_kernel_read_shape_inputs(k, g_drv, NULL, stream, t.desc, dev, t.n, &hv, err, sizeof err)) {
        plus_binding b;
        if (!plus_kernel_bind(k, t.desc, t.n, (size_t)p->n_out, &b, err, sizeof err)) {
            if (mode & 2) {   /* host staging: inputs copied in, outputs out, sizes from the run */
                plus_host_in hin[PLUS_MAX_IN + 1];
                plus_host_out hout[PLUS_MAX_OUT];
                void* obuf[PLUS_MAX_OUT] = {0};
                int ok = 1;
                for (size_t i = 0; i < t.n; i++) hin[i] = (plus_host_in){t.data[i], t.bytes[i]};
                for (int o = 0; o < p->n_out && ok; o++) {
                    long long elems = fz_elems(b.out_dims[o], p->out[o].rank);
                    long long bytes = plus_tensor_bytes(p->out[o].dtype, elems);
                    ok = bytes >= 0;
                    obuf[o] = malloc(bytes > 0 ? (size_t)bytes : 1);
                    hout[o] = (plus_host_out){obuf[o], bytes > 0 ? (size_t)bytes : 0};
                }
                if (ok) (void)plus_kernel_run_staged(k, g_drv, hin, t.n, hout, (size_t)p->n_out, &b, err, sizeof err);
                for (int o = 0; o < p->n_out; o++) free(obuf[o]);
            } else {
                PlusArgs args;
                memset(&args, 0, sizeof args);
                for (size_t i = 0; i < t.n && i < PLUS_MAX_IN; i++) args.in[i] = t.data[i];
                (void)plus_kernel_launch(k, g_drv, NULL, stream, &b, &args, err, sizeof err);
            }
        }
    }
    fz_free_inputs(&t);
    plus_kernel_destroy(k);
    if (g_live()) abort();   /* every module unloaded, every buffer freed */
    return 0;
}
