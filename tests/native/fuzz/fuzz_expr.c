/* libFuzzer entry point `expr`: plus_expr_compile and plus_expr_eval (expr.c). Input: the expression
 * token (up to the first NUL), then the bytes of the symbol count, the value mask, the bound mask and
 * the environment's symbol and value slots. */
#include <stdio.h>

#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fz_in in = {data, size};
    char* tok = fz_cstr(&in);
    int nsym = fz_u8(&in) % (PLUS_MAX_SYM + 1);
    uint32_t vmask = (uint32_t)fz_bytes_le(&in, 4);
    plus_env env;
    memset(&env, 0, sizeof env);
    env.bound = (uint32_t)fz_bytes_le(&in, 4);
    for (int k = 0; k < PLUS_MAX_SYM && in.n; k++) env.sym[k] = (int64_t)fz_bytes_le(&in, fz_u8(&in) % 9);
    for (int k = 0; k < PLUS_MAX_V && in.n; k++) env.v[k] = (int64_t)fz_bytes_le(&in, fz_u8(&in) % 9);
    plus_plan p;
    memset(&p, 0, sizeof p);
    char err[PLUS_ERR_LEN];
    plus_expr e;
    if (!plus_expr_compile(&p, tok, nsym, vmask, &e, err, sizeof err)) {
        if (e.n < 1 || e.off != 0 || e.n != p.n_items) abort();
        e.line = 0;
        int64_t v;
        (void)plus_expr_eval(&p, e, &env, &v, err, sizeof err);
        /* a second expression after the first: offsets into the shared item array */
        plus_expr e2;
        if (!plus_expr_compile(&p, tok, nsym, vmask, &e2, err, sizeof err)) {
            if (e2.off != e.n || e2.n != e.n) abort();
            e2.line = 0;
            int64_t v2;
            int r1 = plus_expr_eval(&p, e, &env, &v, err, sizeof err);
            int r2 = plus_expr_eval(&p, e2, &env, &v2, err, sizeof err);
            if (r1 != r2 || (!r1 && v != v2)) abort();   /* the same token evaluates the same */
        }
    } else if (p.n_items != 0) {
        abort();   /* a failed compile leaves no items behind */
    }
    free(p.items);
    free(tok);
    return 0;
}
