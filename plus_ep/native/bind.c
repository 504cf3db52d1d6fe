/* Bind one run: check inputs against the plan, bind symbols from input axes and shape-tensor values,
 * evaluate values, output shapes, scratch sizes, the route and launch geometry (checked against the
 * launch limits); and the partial binding of shape inference. No heap memory: everything lives in
 * the caller's plus_binding / plus_infer_output. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "bind.h"

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
        else if (s->kind[d] == PLUS_DIM_EXPR) {
            char e[256];
            plus_expr_text(p, s->dexpr[d], e, sizeof e);
            put(b, "(%s)", e);
        }
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

static const char* sym_label(const plus_plan* p, int k, char* buf, size_t n) {
    if (p->sym_name[k][0]) snprintf(buf, n, "%s (s%d)", p->sym_name[k], k);
    else snprintf(buf, n, "s%d", k);
    return buf;
}

static int no_route(const plus_plan* p, const plus_binding* b, int g, int first, int end, char* err, size_t errlen);

int plus_plan_input_on_host(const plus_plan* p, int i) { return i >= 0 && i < p->n_in && p->in[i].host; }

/* What the original graph says of such inputs: a quotient or element count that does not come out
 * exactly is a Reshape (or another view) that ONNX Runtime refuses too. */
#define RESHAPE_SAYS "the original graph's Reshape refuses these inputs too (ONNX Runtime: \"The input tensor " \
                     "cannot be reshaped to the requested shape\")"
/* After a 0 the Reshape copied: a -1 elsewhere in its shape may have taken up what the kernels' dims cannot. */
#define ZEROS_SAYS "ONNX Runtime's Reshape refuses such inputs too (\"The input tensor cannot be reshaped to the " \
                   "requested shape\") unless a -1 in the shape takes up the difference; " DISABLE_SAYS
#define DISABLE_SAYS "if ONNX Runtime runs these inputs, rewrite with `plus-ep rewrite IN -o OUT --disable <pattern>`"

/* `shapev` lines: symbols from the values of host-resident shape tensors. A 0 binds the line's `zero`
 * (ONNX Reshape, allowzero 0: its input's dim there), recorded in *zeros; `-` refuses it. */
static int bind_shapev(const plus_plan* p, const plus_tensor_desc* inputs, const char* const* names, plus_env* env,
                       uint32_t* zeros, char* err, size_t errlen) {
    char lab[PLUS_NAME_LEN + 16];
    for (int j = 0; j < p->n_shapev; j++) {
        const plus_shapev* sv = &p->shapev[j];
        const plus_tensor_desc* t = &inputs[sv->input];
        const char* nm = names && names[sv->input] && names[sv->input][0] ? names[sv->input] : "";
        if (!t->present || !t->host) {
            snprintf(err, errlen, "input %d%s%s%s: its values bind %s (plan line %d `%s`) but %s", sv->input,
                     nm[0] ? " '" : "", nm, nm[0] ? "'" : "", sym_label(p, sv->sym, lab, sizeof lab), sv->line,
                     plus_plan_line(p, sv->line),
                     t->present ? "they are not in host memory (the op must declare the input CPU-resident)"
                                : "the input is absent");
            return -1;
        }
        int64_t n = t->rank == 0 ? 1 : t->dims[0];
        if (sv->elem >= n) {
            snprintf(err, errlen, "input %d%s%s%s has %" PRId64 " values; plan line %d `%s` reads element %d", sv->input,
                     nm[0] ? " '" : "", nm, nm[0] ? "'" : "", n, sv->line, plus_plan_line(p, sv->line), sv->elem);
            return -1;
        }
        int64_t x = t->dtype == 7 ? ((const int64_t*)t->host)[sv->elem] : ((const int32_t*)t->host)[sv->elem];
        if (x < 0) {
            snprintf(err, errlen, "input %d%s%s%s: element %d is %" PRId64 ", not a size for %s (plan line %d `%s`)",
                     sv->input, nm[0] ? " '" : "", nm, nm[0] ? "'" : "", sv->elem, x,
                     sym_label(p, sv->sym, lab, sizeof lab), sv->line, plus_plan_line(p, sv->line));
            return -1;
        }
        if (x == 0 && sv->zero == PLUS_ZERO_REFUSE) {
            snprintf(err, errlen, "input %d%s%s%s: element %d is 0, which the original graph's Reshape cannot take "
                     "there (with allowzero 0 its input has no dim %d to copy, which ONNX Runtime refuses too; with allowzero 1 "
                     "the shape also holds a -1, invalid ONNX) or these kernels cannot take for %s (plan line %d `%s`); "
                     DISABLE_SAYS,
                     sv->input, nm[0] ? " '" : "", nm, nm[0] ? "'" : "", sv->elem, sv->elem,
                     sym_label(p, sv->sym, lab, sizeof lab), sv->line, plus_plan_line(p, sv->line));
            return -1;
        }
        if (x == 0 && sv->zero == PLUS_ZERO_EXPR) {
            if (plus_expr_eval(p, sv->zexpr, env, &x, err, errlen)) return -1;
            if (x < 0) {
                snprintf(err, errlen, "input %d%s%s%s: element %d is 0, which the Reshape reads as its input's dim "
                         "there, but that evaluates to %" PRId64 " (plan line %d `%s`)", sv->input, nm[0] ? " '" : "", nm,
                         nm[0] ? "'" : "", sv->elem, x, sv->line, plus_plan_line(p, sv->line));
                return -1;
            }
            if (x == 0 && sv->infer) {
                snprintf(err, errlen, "input %d%s%s%s: element %d is 0, which the original graph's Reshape reads as its "
                         "input's dim %d, also 0, leaving the -1 in its shape nothing to divide by (plan line %d `%s`): "
                         RESHAPE_SAYS, sv->input, nm[0] ? " '" : "", nm, nm[0] ? "'" : "", sv->elem, sv->elem, sv->line,
                         plus_plan_line(p, sv->line));
                return -1;
            }
            if (x) *zeros |= 1u << j;   /* a 0 the line keeps (allowzero 1) or copies as 0 needs no word */
        }
        if (env->bound >> sv->sym & 1u) {
            if (env->sym[sv->sym] != x) {
                sbuf s = {err, errlen, 0};
                put(&s, "input %d%s%s%s: element %d is ", sv->input, nm[0] ? " '" : "", nm, nm[0] ? "'" : "", sv->elem);
                if (*zeros >> j & 1u) put(&s, "0, which the Reshape reads as its input's dim there, %" PRId64 ",", x);
                else put(&s, "%" PRId64, x);
                put(&s, " but %s = %" PRId64 " from an input axis (plan line %d `%s`)",
                    sym_label(p, sv->sym, lab, sizeof lab), env->sym[sv->sym], sv->line, plus_plan_line(p, sv->line));
                return -1;
            }
        } else {
            env->sym[sv->sym] = x;
            env->bound |= 1u << sv->sym;
        }
    }
    return 0;
}

/* The symbols bound so far, "batch_seq=6 seq=4", for messages. */
static void put_symbols(sbuf* s, const plus_plan* p, const plus_env* env) {
    for (int k = 0, first = 1; k < p->n_sym; k++)
        if (env->bound >> k & 1u) {
            if (p->sym_name[k][0]) put(s, "%s%s=%" PRId64, first ? "" : " ", p->sym_name[k], env->sym[k]);
            else put(s, "%ss%d=%" PRId64, first ? "" : " ", k, env->sym[k]);
            first = 0;
        }
}

static void put_dims(sbuf* s, const int64_t* dims, int rank) {
    put(s, "{");
    for (int d = 0; d < rank; d++) put(s, d ? ",%" PRId64 : "%" PRId64, dims[d]);
    put(s, "}");
}

/* What the original graph says of a run whose shape-tensor values and tensors disagree with what the
 * kernels need: its Reshape refuses them too (`otherwise`), saying first which 0 elements it read as its
 * input's dims (allowzero 0, as binding did: `zeros`). A 0 a plan without `zero` fields took as is may be
 * one ORT runs: then the message says so instead. */
static void put_reshape_says(sbuf* s, const plus_plan* p, const plus_env* env, uint32_t zeros, const char* otherwise) {
    for (int j = 0; j < p->n_shapev; j++) {
        const plus_shapev* sv = &p->shapev[j];
        if (sv->zero == PLUS_ZERO_ASIS && (env->bound >> sv->sym & 1u) && env->sym[sv->sym] == 0) {
            put(s, "element %d of input %d is 0, which a Reshape reads as its input's own dim (allowzero 0) and "
                "these kernels do not (a plan written before `shapev` said what a 0 means: re-run `plus-ep rewrite`); "
                DISABLE_SAYS, sv->elem, sv->input);
            return;
        }
    }
    if (!zeros) {
        put(s, "%s", otherwise);
        return;
    }
    for (int j = 0; j < p->n_shapev; j++)
        if (zeros >> j & 1u) {
            char lab[PLUS_NAME_LEN + 16];
            put(s, "element %d of input %d is 0, which the Reshape (allowzero 0) reads as its input's dim there: "
                "%s = %" PRId64 "; ", p->shapev[j].elem, p->shapev[j].input,
                sym_label(p, p->shapev[j].sym, lab, sizeof lab), env->sym[p->shapev[j].sym]);
        }
    put(s, ZEROS_SAYS);
}

static int elem_count(const int64_t* dims, int rank, int64_t* out) {
    int64_t n = 1;
    for (int d = 0; d < rank; d++)
        if (dims[d] < 0 || __builtin_mul_overflow(n, dims[d], &n)) return -1;
    *out = n;
    return 0;
}

/* `extent in` lines: what the kernels read of each present input is exactly its element count. */
static int check_in_extents(const plus_plan* p, const plus_tensor_desc* inputs, const char* const* names,
                            const plus_binding* b, char* err, size_t errlen) {
    const plus_env* env = &b->env;
    for (int j = 0; j < p->n_extent; j++) {
        const plus_extent* x = &p->extent[j];
        int i = x->index;
        if (x->out || !inputs[i].present) continue;
        int64_t want, have = -1;
        if (plus_expr_eval(p, x->e, env, &want, err, errlen)) return -1;
        if (!elem_count(inputs[i].dims, inputs[i].rank, &have) && have == want) continue;
        sbuf s = {err, errlen, 0};
        put(&s, "input %d", i);
        if (names && names[i] && names[i][0]) put(&s, " '%s'", names[i]);
        put(&s, " ");
        put_dims(&s, inputs[i].dims, inputs[i].rank);
        put(&s, " has %" PRId64 " elements but the kernels read %" PRId64 " (plan line %d `%s`; ", have, want,
            x->e.line, plus_plan_line(p, x->e.line));
        put_symbols(&s, p, env);
        put(&s, "): ");
        put_reshape_says(&s, p, env, b->zeros, RESHAPE_SAYS);
        return -1;
    }
    return 0;
}

/* `bcast` lines: an input dim the kernels broadcast is 1 or the size it meets (ONNX broadcasting). */
static int check_bcast(const plus_plan* p, const plus_tensor_desc* inputs, const char* const* names,
                       const plus_env* env, char* err, size_t errlen) {
    for (int j = 0; j < p->n_bcast; j++) {
        const plus_bcast* x = &p->bcast[j];
        const plus_tensor_desc* t = &inputs[x->index];
        if (!t->present) continue;
        int64_t want, have = t->dims[x->dim];
        if (plus_expr_eval(p, x->e, env, &want, err, errlen)) return -1;
        if (have == 1 || have == want) continue;
        sbuf s = {err, errlen, 0};
        put(&s, "input %d", x->index);
        if (names && names[x->index] && names[x->index][0]) put(&s, " '%s'", names[x->index]);
        put(&s, " ");
        put_dims(&s, t->dims, t->rank);
        if (want == 1) {   /* ONNX broadcasts the other side (a dim bound elsewhere in the node) against this one */
            put(&s, ": dim %d is %" PRId64 " where the other operands give 1, which ONNX broadcasts against it and "
                "these kernels cannot (plan line %d `%s`; ", x->dim, have, x->line, plus_plan_line(p, x->line));
            put_symbols(&s, p, env);
            put(&s, "): " DISABLE_SAYS);
            return -1;
        }
        put(&s, ": dim %d is %" PRId64 " where the other operands give %" PRId64 ", neither equal nor 1 (plan line %d `%s`; ",
            x->dim, have, want, x->line, plus_plan_line(p, x->line));
        put_symbols(&s, p, env);
        put(&s, "): ONNX broadcasting refuses these inputs, and ONNX Runtime too (\"Attempting to broadcast an axis by "
            "a dimension other than 1\")");
        return -1;
    }
    return 0;
}

/* `equal` lines: dims the rewrite took as equal are equal for this run. */
static int check_equal(const plus_plan* p, const plus_binding* bd, char* err, size_t errlen) {
    const plus_env* env = &bd->env;
    for (int j = 0; j < p->n_equal; j++) {
        const plus_equal* x = &p->equal[j];
        int64_t a, b;
        if (plus_expr_eval(p, x->a, env, &a, err, errlen) || plus_expr_eval(p, x->b, env, &b, err, errlen)) return -1;
        if (a == b) continue;
        char at[256], bt[256];
        plus_expr_text(p, x->a, at, sizeof at);
        plus_expr_text(p, x->b, bt, sizeof bt);
        sbuf s = {err, errlen, 0};
        put(&s, "the kernels take (%s) = %" PRId64 " and (%s) = %" PRId64 " as one dim, and these inputs make them differ "
            "(plan line %d `%s`; ", at, a, bt, b, x->line, plus_plan_line(p, x->line));
        put_symbols(&s, p, env);
        put(&s, "): ");
        put_reshape_says(&s, p, env, bd->zeros, "the original graph's node refuses such shapes unless a dim of 1 broadcasts there; "
                         DISABLE_SAYS);
        return -1;
    }
    return 0;
}

/* `exact` lines, then `extent out` lines, once the output shapes are known. */
static int check_out_extents(const plus_plan* p, const plus_binding* b, char* err, size_t errlen) {
    for (int j = 0; j < p->n_exact; j++) {
        const plus_exact* x = &p->exact[j];
        int64_t num, den;
        if (plus_expr_eval(p, x->num, &b->env, &num, err, errlen) || plus_expr_eval(p, x->den, &b->env, &den, err, errlen))
            return -1;
        if (den != 0 && num % den == 0) continue;
        char nt[256], dt[256];
        plus_expr_text(p, x->num, nt, sizeof nt);
        plus_expr_text(p, x->den, dt, sizeof dt);
        sbuf s = {err, errlen, 0};
        put(&s, "%s %d dim %d is (%s)/(%s) = %" PRId64 "/%" PRId64 ", which does not divide exactly (plan line %d `%s`; ",
            x->out ? "output" : "input", x->index, x->dim, nt, dt, num, den, x->line, plus_plan_line(p, x->line));
        put_symbols(&s, p, &b->env);
        put(&s, "): ");
        put_reshape_says(&s, p, &b->env, b->zeros, RESHAPE_SAYS);
        return -1;
    }
    for (int j = 0; j < p->n_extent; j++) {
        const plus_extent* x = &p->extent[j];
        int o = x->index;
        if (!x->out) continue;
        int64_t want;
        if (plus_expr_eval(p, x->e, &b->env, &want, err, errlen)) return -1;
        if (want == b->out_elems[o]) continue;
        sbuf s = {err, errlen, 0};
        put(&s, "output %d would be ", o);
        put_dims(&s, b->out_dims[o], p->out[o].rank);
        put(&s, " (%" PRId64 " elements, plan line %d) but the kernels write %" PRId64 " (plan line %d `%s`; ",
            b->out_elems[o], p->out[o].line, want, x->e.line, plus_plan_line(p, x->e.line));
        put_symbols(&s, p, &b->env);
        put(&s, "): ");
        put_reshape_says(&s, p, &b->env, b->zeros, RESHAPE_SAYS);
        return -1;
    }
    return 0;
}

static int absent_error(const plus_plan* p, int out, size_t i, const char* const* names, char* err, size_t errlen) {
    sbuf s = {err, errlen, 0};
    put(&s, "%s %zu", out ? "output" : "input", i);
    if (!out && names && names[i] && names[i][0]) put(&s, " '%s'", names[i]);
    put(&s, " is absent (wired \"\") but the kernels %s it (plan line %d; no `optional %s %zu` record): wire a "
        "tensor there, or re-run `plus-ep rewrite` on the original model", out ? "write" : "read",
        out ? p->out[i].line : p->in[i].line, out ? "out" : "in", i);
    return -1;
}

int plus_plan_check_wiring(const plus_plan* p, const int* in_present, size_t n_in, const int* out_present,
                           size_t n_out, const char* const* names, char* err, size_t errlen) {
    if (n_in != (size_t)p->n_in || n_out != (size_t)p->n_out) {
        snprintf(err, errlen, "the node has %zu inputs and %zu outputs, its plan declares %d and %d", n_in, n_out,
                 p->n_in, p->n_out);
        return -1;
    }
    for (size_t i = 0; i < n_in; i++)
        if (!in_present[i] && !p->in_optional[i]) return absent_error(p, 0, i, names, err, errlen);
    for (size_t o = 0; o < n_out; o++)
        if (!out_present[o] && !p->out_optional[o]) return absent_error(p, 1, o, names, err, errlen);
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
    for (size_t i = 0; i < n_in; i++) {
        if (!inputs[i].present && !p->in_optional[i]) return absent_error(p, 0, i, names, err, errlen);
        if (inputs[i].present && bind_input(p, i, &inputs[i], names, &b->env, err, errlen)) return -1;
    }
    if (bind_shapev(p, inputs, names, &b->env, &b->zeros, err, errlen)) return -1;
    for (size_t i = 0; i < n_in; i++)   /* expression dims, now that every symbol is bound */
        for (int d = 0; inputs[i].present && d < p->in[i].rank; d++) {
            if (p->in[i].kind[d] != PLUS_DIM_EXPR) continue;
            int64_t want;
            char why[160];
            if (plus_expr_eval(p, p->in[i].dexpr[d], &b->env, &want, err, errlen)) return -1;
            if (inputs[i].dims[d] == want) continue;
            snprintf(why, sizeof why, "dim %d must be %" PRId64 " from the other dims", d, want);
            return input_error(p, i, names, &inputs[i], why, err, errlen);
        }
    if (check_bcast(p, inputs, names, &b->env, err, errlen) || check_in_extents(p, inputs, names, b, err, errlen))
        return -1;
    for (int i = 0; i < p->n_val; i++)
        if (plus_expr_eval(p, p->val[i], &b->env, &b->env.v[p->val_slot[i]], err, errlen)) return -1;
    for (int o = 0; o < p->n_out; o++)
        for (int d = 0; d < p->out[o].rank; d++) {
            int64_t x;
            if (plus_expr_eval(p, p->out[o].dim[d], &b->env, &x, err, errlen)) {   /* a quotient by a 0 the run gave */
                sbuf s = {err, errlen, strlen(err)};
                put(&s, "; these kernels have no output shape for such inputs: " DISABLE_SAYS);
                return -1;
            }
            if (x < 0) {
                snprintf(err, errlen, "output %d dim %d evaluates to %" PRId64 " (plan line %d `%s`)", o, d, x,
                         p->out[o].line, plus_plan_line(p, p->out[o].line));
                return -1;
            }
            b->out_dims[o][d] = x;
        }
    b->empty = p->n_out > 0;
    for (int o = 0; o < p->n_out; o++) {
        if (elem_count(b->out_dims[o], p->out[o].rank, &b->out_elems[o])) {
            snprintf(err, errlen, "output %d has more elements than fit in int64 (plan line %d `%s`)", o, p->out[o].line,
                     plus_plan_line(p, p->out[o].line));
            return -1;
        }
        b->empty &= b->out_elems[o] == 0;
    }
    if (check_out_extents(p, b, err, errlen) || check_equal(p, b, err, errlen)) return -1;
    for (int k = 0; k < PLUS_MAX_SCRATCH; k++) {
        if (!p->has_scratch[k]) continue;
        if (plus_expr_eval(p, p->scratch[k], &b->env, &b->scratch_bytes[k], err, errlen)) return -1;
        if (b->scratch_bytes[k] < 0) {
            snprintf(err, errlen, "scratch %d evaluates to %" PRId64 " bytes (plan line %d)", k, b->scratch_bytes[k],
                     p->scratch[k].line);
            return -1;
        }
    }
    for (int g = 0; g < p->n_groups; g++) {
        int first = p->n_groups > 1 ? p->group_first[g] : 0;
        int end = g + 1 < p->n_groups ? p->group_first[g + 1] : p->n_routes;
        b->group_route[g] = -1;
        for (int r = first; r < end && b->group_route[g] < 0; r++) {
            int64_t x;
            if (plus_expr_eval(p, p->route[r], &b->env, &x, err, errlen)) return -1;
            if (x) b->group_route[g] = r;
        }
        if (b->group_route[g] < 0) return no_route(p, b, g, first, end, err, errlen);
    }
    b->route = b->group_route[0];
    return 0;
}

int plus_plan_group_of(const plus_plan* p, const char* arch) {
    if (p->n_groups <= 1 && !p->group_n_archs[0]) return 0;
    for (int g = 0; g < p->n_groups; g++)
        for (int j = 0; j < p->group_n_archs[g]; j++)
            if (!strcmp(p->group_arch[g][j], arch)) return g;
    return -1;
}

static int no_route(const plus_plan* p, const plus_binding* b, int g, int first, int end, char* err, size_t errlen) {
    sbuf s = {err, errlen, 0};
    put(&s, "no route applies (all %d route expressions", end - first);
    if (p->group_n_archs[g]) {
        put(&s, " for");
        for (int j = 0; j < p->group_n_archs[g]; j++) put(&s, " %s", p->group_arch[g][j]);
    }
    put(&s, " are 0) for symbols");
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
    if (x[0] == 0 || x[1] == 0 || x[2] == 0) return 1;
    static const int64_t limit[6] = {PLUS_GRID_X_MAX, PLUS_GRID_YZ_MAX, PLUS_GRID_YZ_MAX, PLUS_BLOCK_XY_MAX,
                                     PLUS_BLOCK_XY_MAX, PLUS_BLOCK_Z_MAX};
    for (int i = 0; i < 6; i++)
        if (x[i] > limit[i]) {
            snprintf(err, errlen, "kernel `%s` %s = %" PRId64 " exceeds CUDA's limit of %" PRId64 " for this input size "
                     "(grid %" PRId64 ",%" PRId64 ",%" PRId64 " block %" PRId64 ",%" PRId64 ",%" PRId64 "; plan line %d `%s`); "
                     "split the input, or rewrite the model with `plus-ep rewrite IN -o OUT --disable <pattern>` to leave such "
                     "subgraphs unfused", k->entry, what[i], x[i],
                     limit[i], x[0], x[1], x[2], x[3], x[4], x[5], k->line, plus_plan_line(p, k->line));
            return -1;
        }
    if (x[3] * x[4] * x[5] > (int64_t)PLUS_BLOCK_THREADS_MAX) {
        snprintf(err, errlen, "kernel `%s` block %" PRId64 "x%" PRId64 "x%" PRId64 " has more than %u threads "
                 "(plan line %d `%s`)", k->entry, x[3], x[4], x[5], PLUS_BLOCK_THREADS_MAX, k->line,
                 plus_plan_line(p, k->line));
        return -1;
    }
    return 0;
}

/* ---- shape inference ---- */

static int expr_known(const plus_plan* p, plus_expr e, const plus_env* env, uint32_t vmask) {
    for (int i = 0; i < e.n; i++) {
        const plus_item* it = &p->items[e.off + i];
        if (it->op == PX_SYM && !(env->bound >> it->arg & 1u)) return 0;
        if (it->op == PX_VAL && !(vmask >> it->arg & 1u)) return 0;
    }
    return 1;
}

void plus_infer_outputs(const plus_plan* p, const plus_infer_input* in, size_t n_in,
                        plus_infer_output out[PLUS_MAX_OUT]) {
    plus_env env;
    char sym_names[PLUS_MAX_SYM][PLUS_NAME_LEN];
    char err[PLUS_ERR_LEN];
    memset(&env, 0, sizeof env);
    memset(sym_names, 0, sizeof sym_names);
    for (size_t i = 0; i < n_in && i < (size_t)p->n_in; i++) {   /* bind from the known input dims */
        const plus_infer_input* t = &in[i];
        if (!t->known || t->rank != p->in[i].rank || t->rank > PLUS_MAX_RANK) continue;
        for (int d = 0; d < t->rank; d++) {
            if (p->in[i].kind[d] != PLUS_DIM_SYM) continue;
            int k = (int)p->in[i].val[d];
            const char* nm = t->names ? t->names[d] : NULL;
            if (t->dims[d] >= 0 && !(env.bound >> k & 1u)) {
                env.sym[k] = t->dims[d];
                env.bound |= 1u << k;
            } else if (t->dims[d] < 0 && nm && nm[0] && !sym_names[k][0]) {
                snprintf(sym_names[k], PLUS_NAME_LEN, "%s", nm);
            }
        }
    }
    uint32_t vmask = 0;
    for (int j = 0; j < p->n_val; j++) {
        int slot = p->val_slot[j];
        if (expr_known(p, p->val[j], &env, vmask) && !plus_expr_eval(p, p->val[j], &env, &env.v[slot], err, sizeof err))
            vmask |= 1u << slot;
    }
    for (int o = 0; o < p->n_out; o++) {
        plus_infer_output* r = &out[o];
        r->dtype = p->out[o].dtype;
        r->rank = p->out[o].rank;
        for (int d = 0; d < r->rank; d++) {
            const plus_expr e = p->out[o].dim[d];
            r->names[d][0] = 0;
            if (expr_known(p, e, &env, vmask) && !plus_expr_eval(p, e, &env, &r->dims[d], err, sizeof err) &&
                r->dims[d] >= 0)
                continue;
            r->dims[d] = -1;
            const plus_item* it = &p->items[e.off];
            if (e.n == 1 && it->op == PX_SYM && sym_names[it->arg][0])
                snprintf(r->names[d], sizeof r->names[d], "%s", sym_names[it->arg]);
            else
                snprintf(r->names[d], sizeof r->names[d], "%s_o%d_d%d", p->node, o, d);
        }
    }
}
