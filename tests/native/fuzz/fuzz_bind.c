/* libFuzzer entry point `bind`: plus_bind (bind.c) and everything a run computes from it: launch
 * geometry of every kernel line of each group's chosen route (plus_kernel_geom), output byte counts
 * (plus_tensor_bytes) and shape inference from the same dims. Input: plan text up to a NUL, then the
 * run's inputs (fz_make_inputs: close to what the plan expects, deviating where the fuzzer says). */
#include <stdio.h>

#include "bind.h"
#include "kernel.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fz_in in = {data, size};
    plus_plan p;
    char* text = fz_plan(&in, &p);
    if (!text) return 0;
    char err[PLUS_ERR_LEN];
    fz_tensors t;
    fz_make_inputs(&in, &p, &t);
    const char* names[PLUS_MAX_IN + 1];
    for (size_t i = 0; i < t.n; i++) names[i] = i % 3 ? "x" : "";
    plus_binding b;
    size_t n_out = (size_t)p.n_out + (fz_u8(&in) == 0xFF);
    if (!plus_bind(&p, t.desc, t.n, n_out, fz_u8(&in) & 1 ? names : NULL, &b, err, sizeof err)) {
        for (int g = 0; g < p.n_groups; g++) {
            int r = b.group_route[g];
            if (r < 0 || r >= p.n_routes || p.route_group[r] != (p.n_groups > 1 ? g : 0)) abort();
            for (int k = 0; k < p.n_kernels; k++) {
                if (p.kernel[k].route != r) continue;
                plus_geom geom;
                int rc = plus_kernel_geom(&p, &p.kernel[k], &b.env, &geom, err, sizeof err);
                if (rc == 0 && (geom.block[0] * geom.block[1] * geom.block[2] > PLUS_BLOCK_THREADS_MAX ||
                                geom.grid[1] > PLUS_GRID_YZ_MAX || geom.grid[2] > PLUS_GRID_YZ_MAX))
                    abort();   /* geometry that passed is within CUDA's limits */
            }
        }
        for (int o = 0; o < p.n_out; o++) {
            long long elems = 1;
            int over = 0;
            for (int d = 0; d < p.out[o].rank; d++) {
                if (b.out_dims[o][d] < 0) abort();
                over |= __builtin_mul_overflow(elems, (long long)b.out_dims[o][d], &elems);
            }
            (void)plus_tensor_bytes(p.out[o].dtype, over ? -1 : elems);
        }
        for (int s = 0; s < PLUS_MAX_SCRATCH; s++)
            if (b.scratch_bytes[s] < 0) abort();
    } else if (!memchr(err, 0, sizeof err)) {
        abort();
    }
    plus_infer_input inf[PLUS_MAX_IN + 1];
    for (size_t i = 0; i < t.n; i++)
        inf[i] = (plus_infer_input){.known = t.desc[i].present, .rank = t.desc[i].rank, .dims = t.desc[i].dims};
    plus_infer_output out[PLUS_MAX_OUT];
    plus_infer_outputs(&p, inf, t.n, out);
    fz_free_inputs(&t);
    plus_plan_free(&p);
    free(text);
    return 0;
}
