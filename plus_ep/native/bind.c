/* Bind one run: check inputs against the plan, evaluate values, output shapes, scratch sizes, the
 * route and launch geometry. No heap memory: everything lives in the caller's plus_binding. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "plus_plan.h"

/* ONNX TensorProto numbers equal the C API's for 1..23; 24..26 are permuted (ABI sheet §4). */
int plus_dtype_from_onnx(int t) {
    if (t >= 1 && t <= 23) return t;
    if (t == 24) return 26;   /* FLOAT8E8M0 */
    if (t == 25) return 24;   /* UINT2 */
    if (t == 26) return 25;   /* INT2 */
    return -1;
}

static const char* const DTYPE_NAMES[] = {
    "undefined", "float32", "uint8", "int8", "uint16", "int16", "int32", "int64", "string", "bool",
    "float16", "float64", "uint32", "uint64", "complex64", "complex128", "bfloat16", "float8e4m3fn",
    "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz", "uint4", "int4", "float4e2m1", "uint2", "int2",
    "float8e8m0",
};
static const int DTYPE_BITS[] = {0, 32, 8, 8, 16, 16, 32, 64, 0, 8, 16, 64, 32, 64, 64, 128, 16, 8, 8, 8, 8,
                                 4, 4, 4, 2, 2, 8};

const char* plus_dtype_name(int t) {
    return t >= 0 && t < (int)(sizeof DTYPE_NAMES / sizeof *DTYPE_NAMES) ? DTYPE_NAMES[t] : "unknown";
}

int plus_dtype_bits(int t) {
    return t >= 0 && t < (int)(sizeof DTYPE_BITS / sizeof *DTYPE_BITS) ? DTYPE_BITS[t] : 0;
}

/* Append to a bounded buffer. */
typedef struct { char* s; size_t n, len; } sbuf;
static void put(sbuf* b, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf* b, const char* fmt, ...) {
    if (b->len >= b->n) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->s + b->len, b->n - b->len, fmt, ap);
    va_end(ap);
    if (k > 0) b->len += (size_t)k;
    if (b->len >= b->n) b->len = b->n - 1;
}

static void put_expected(sbuf* b, const plus_plan* p, const plus_in_spec* s) {
    put(b, "%s[", plus_dtype_name(s->dtype));
    for (int d = 0; d < s->rank; d++) {
        if (d) put(b, ",");
        if (s->kind[d] == PLUS_DIM_ANY) put(b, "*");
        else if (s->kind[d] == PLUS_DIM_LIT) put(b, "%" PRId64, s->val[d]);
        else if (p->sym_name[s->val[d]][0]) put(b, "%s", p->sym_name[s->val[d]]);
        else put(b, "s%" PRId64, s->val[d]);
    }
    put(b, "]");
}

static void put_actual(sbuf* b, const plus_tensor_desc* t) {
    put(b, "%s[", plus_dtype_name(t->dtype));
    for (int d = 0; d < t->rank; d++) put(b, d ? ",%" PRId64 : "%" PRId64, t->dims[d]);
    put(b, "]");
}

static int input_error(const plus_plan* p, size_t i, const char* const* names, const plus_tensor_desc* t,
                       const char* why, char* err, size_t errlen) {
    sbuf b = {err, errlen, 0};
    put(&b, "input %zu", i);
    if (names && names[i] && names[i][0]) put(&b, " '%s'", names[i]);
    put(&b, ": expected ");
    put_expected(&b, p, &p->in[i]);
    put(&b, ", got ");
    put_actual(&b, t);
    put(&b, " (%s; plan line %d)", why, p->in[i].line);
    return -1;
}

static int bind_input(const plus_plan* p, size_t i, const plus_tensor_desc* t, const char* const* names,
                      plus_env* env, char* err, size_t errlen) {
    const plus_in_spec* s = &p->in[i];
    char why[160];
    if (t->dtype != s->dtype) return input_error(p, i, names, t, "element type differs", err, errlen);
    if (t->rank != s->rank) return input_error(p, i, names, t, "rank differs", err, errlen);
    for (int d = 0; d < s->rank; d++) {
        int64_t x = t->dims[d];
        if (x < 0) {
            snprintf(why, sizeof why, "dim %d is negative", d);
            return input_error(p, i, names, t, why, err, errlen);
        }
        if (s->kind[d] == PLUS_DIM_LIT && x != s->val[d]) {
            snprintf(why, sizeof why, "dim %d must be %" PRId64, d, s->val[d]);
            return input_error(p, i, names, t, why, err, errlen);
        }
        if (s->kind[d] == PLUS_DIM_SYM) {
            int k = (int)s->val[d];
            if (env->bound >> k & 1u) {
                if (env->sym[k] != x) {
                    if (p->sym_name[k][0])
                        snprintf(why, sizeof why, "dim %d must equal %s = %" PRId64 ", bound by an earlier dim", d,
                                 p->sym_name[k], env->sym[k]);
                    else
                        snprintf(why, sizeof why, "dim %d must equal s%d = %" PRId64 ", bound by an earlier dim", d, k,
                                 env->sym[k]);
                    return input_error(p, i, names, t, why, err, errlen);
                }
            } else {
                env->sym[k] = x;
                env->bound |= 1u << k;
            }
        }
    }
    return 0;
}

int plus_bind(const plus_plan* p, const plus_tensor_desc* inputs, size_t n_in, size_t n_out,
              const char* const* names, plus_binding* b, char* err, size_t errlen) {
    memset(b, 0, sizeof *b);
    if (n_in != (size_t)p->n_in || n_out != (size_t)p->n_out) {
        snprintf(err, errlen, "the node has %zu inputs and %zu outputs, its plan declares %d and %d", n_in, n_out,
                 p->n_in, p->n_out);
        return -1;
    }
    for (size_t i = 0; i < n_in; i++)
        if (inputs[i].present && bind_input(p, i, &inputs[i], names, &b->env, err, errlen)) return -1;
    for (int i = 0; i < p->n_val; i++)
        if (plus_expr_eval(p, p->val[i], &b->env, &b->env.v[p->val_slot[i]], err, errlen)) return -1;
    for (int o = 0; o < p->n_out; o++)
        for (int d = 0; d < p->out[o].rank; d++) {
            int64_t x;
            if (plus_expr_eval(p, p->out[o].dim[d], &b->env, &x, err, errlen)) return -1;
            if (x < 0) {
                snprintf(err, errlen, "output %d dim %d evaluates to %" PRId64 " (plan line %d `%s`)", o, d, x,
                         p->out[o].line, plus_plan_line(p, p->out[o].line));
                return -1;
            }
            b->out_dims[o][d] = x;
        }
    for (int k = 0; k < PLUS_MAX_SCRATCH; k++) {
        if (!p->has_scratch[k]) continue;
        if (plus_expr_eval(p, p->scratch[k], &b->env, &b->scratch_bytes[k], err, errlen)) return -1;
        if (b->scratch_bytes[k] < 0) {
            snprintf(err, errlen, "scratch %d evaluates to %" PRId64 " bytes (plan line %d)", k, b->scratch_bytes[k],
                     p->scratch[k].line);
            return -1;
        }
    }
    for (int r = 0; r < p->n_routes; r++) {
        int64_t x;
        if (plus_expr_eval(p, p->route[r], &b->env, &x, err, errlen)) return -1;
        if (x) {
            b->route = r;
            return 0;
        }
    }
    sbuf s = {err, errlen, 0};
    put(&s, "no route applies (all %d route expressions are 0) for symbols", p->n_routes);
    for (int k = 0; k < p->n_sym; k++)
        if (b->env.bound >> k & 1u) {
            if (p->sym_name[k][0]) put(&s, " %s=%" PRId64, p->sym_name[k], b->env.sym[k]);
            else put(&s, " s%d=%" PRId64, k, b->env.sym[k]);
        }
    return -1;
}

int plus_kernel_geom(const plus_plan* p, const plus_kernel_spec* k, const plus_env* env, plus_geom* g,
                     char* err, size_t errlen) {
    int64_t x[7];
    const plus_expr* e[7] = {&k->grid[0], &k->grid[1], &k->grid[2], &k->block[0], &k->block[1], &k->block[2],
                             &k->smem};
    static const char* const what[7] = {"grid.x", "grid.y", "grid.z", "block.x", "block.y", "block.z", "smem"};
    for (int i = 0; i < 7; i++) {
        if (plus_expr_eval(p, *e[i], env, &x[i], err, errlen)) return -1;
        int64_t lo = i >= 3 && i < 6 ? 1 : 0;
        if (x[i] < lo || x[i] > (int64_t)UINT32_MAX) {
            snprintf(err, errlen, "kernel `%s` %s = %" PRId64 " is out of range (plan line %d `%s`)", k->entry,
                     what[i], x[i], k->line, plus_plan_line(p, k->line));
            return -1;
        }
    }
    for (int i = 0; i < 3; i++) g->grid[i] = (unsigned)x[i], g->block[i] = (unsigned)x[3 + i];
    g->smem = (unsigned)x[6];
    return x[0] == 0 || x[1] == 0 || x[2] == 0 ? 1 : 0;
}
