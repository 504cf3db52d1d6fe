/* libFuzzer entry point `plan`: plus_plan_parse (plan.c, with expr.c compiling every expression) on
 * arbitrary text, then everything a parsed plan answers without a run: each line, route groups,
 * host inputs, and the partial binding of shape inference with no dims known and with the plan's
 * own literal dims. */
#include <stdio.h>

#include "bind.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fz_in in = {data, size};
    plus_plan p;
    char* text = fz_plan(&in, &p);
    if (!text) return 0;
    size_t total = 0;
    for (int i = 0; i <= p.n_lines + 1; i++) total += strlen(plus_plan_line(&p, i));
    for (int g = 0; g < p.n_groups; g++)
        for (int j = 0; j < p.group_n_archs[g]; j++)
            if (plus_plan_group_of(&p, p.group_arch[g][j]) != g) abort();
    (void)plus_plan_group_of(&p, "sm_80");
    for (int i = -1; i <= p.n_in; i++) total += (size_t)plus_plan_input_on_host(&p, i);
    for (int k = 0; k < p.n_kernels; k++) {
        const plus_kernel_spec* ks = &p.kernel[k];
        if (ks->route < 0 || ks->route >= p.n_routes || p.route_group[ks->route] >= p.n_groups) abort();
    }
    /* shape inference: nothing known, then every literal dim known and symbols unknown */
    plus_infer_input inf[PLUS_MAX_IN];
    int64_t dims[PLUS_MAX_IN][PLUS_MAX_RANK];
    plus_infer_output out[PLUS_MAX_OUT];
    memset(inf, 0, sizeof inf);
    plus_infer_outputs(&p, inf, (size_t)p.n_in, out);
    for (int i = 0; i < p.n_in; i++) {
        for (int d = 0; d < p.in[i].rank; d++)
            dims[i][d] = p.in[i].kind[d] == PLUS_DIM_LIT ? p.in[i].val[d] : -1;
        inf[i] = (plus_infer_input){.known = 1, .rank = p.in[i].rank, .dims = dims[i], .names = NULL};
    }
    plus_infer_outputs(&p, inf, (size_t)p.n_in, out);
    for (int o = 0; o < p.n_out; o++)
        for (int d = 0; d < out[o].rank; d++) total += strlen(out[o].names[d]);
    plus_plan_free(&p);
    free(text);
    (void)total;
    return 0;
}
