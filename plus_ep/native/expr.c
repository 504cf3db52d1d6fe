/* Plan expressions: one token of reverse-Polish items joined by ',' over int64 (CONTRACT.md §3). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

static const struct { const char* name; int op; } OPS[] = {
    {"+", PX_ADD}, {"-", PX_SUB}, {"*", PX_MUL}, {"/", PX_DIV}, {"%", PX_MOD},
    {"min", PX_MIN}, {"max", PX_MAX}, {"cdiv", PX_CDIV},
    {"<", PX_LT}, {"<=", PX_LE}, {">", PX_GT}, {">=", PX_GE}, {"==", PX_EQ}, {"!=", PX_NE},
    {"&&", PX_AND}, {"||", PX_OR}, {"!", PX_NOT}, {"?", PX_TERN},
};

static int arity(int op) { return op <= PX_VAL ? 0 : op == PX_NOT ? 1 : op == PX_TERN ? 3 : 2; }

/* Parse a non-negative decimal integer (no sign, no leading '+'); -1 when not one. */
static int parse_index(const char* s, size_t n, int64_t* out) {
    if (n == 0 || n > 18) return -1;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

static int parse_literal(const char* s, size_t n, int64_t* out) {
    char buf[32];
    if (n == 0 || n >= sizeof buf) return -1;
    memcpy(buf, s, n);
    buf[n] = 0;
    const char* p = buf[0] == '-' ? buf + 1 : buf;
    if (!*p) return -1;
    for (; *p; p++)
        if (*p < '0' || *p > '9') return -1;
    errno = 0;
    char* end;
    long long v = strtoll(buf, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

static int push_item(plus_plan* plan, int op, int64_t arg) {
    if (plan->n_items == plan->cap_items) {
        int cap = plan->cap_items ? plan->cap_items * 2 : 256;
        plus_item* p = realloc(plan->items, (size_t)cap * sizeof *p);
        if (!p) return -1;
        plan->items = p;
        plan->cap_items = cap;
    }
    plan->items[plan->n_items].op = op;
    plan->items[plan->n_items].arg = arg;
    plan->n_items++;
    return 0;
}

int plus_expr_compile(plus_plan* plan, const char* tok, int nsym, uint32_t vmask, plus_expr* out,
                      char* err, size_t errlen) {
    int start = plan->n_items, depth = 0;
    const char* p = tok;
    for (;;) {
        const char* q = strchr(p, ',');
        size_t n = q ? (size_t)(q - p) : strlen(p);
        int op = -1;
        int64_t arg = 0;
        if (n == 0) {
            snprintf(err, errlen, "expression `%s`: empty item", tok);
            goto fail;
        }
        for (size_t i = 0; i < sizeof OPS / sizeof OPS[0]; i++)
            if (strlen(OPS[i].name) == n && !memcmp(OPS[i].name, p, n)) op = OPS[i].op;
        if (op < 0 && (p[0] == 's' || p[0] == 'v')) {
            if (parse_index(p + 1, n - 1, &arg)) {
                snprintf(err, errlen, "expression `%s`: bad item `%.*s`", tok, (int)n, p);
                goto fail;
            }
            op = p[0] == 's' ? PX_SYM : PX_VAL;
            if (op == PX_SYM && arg >= nsym) {
                snprintf(err, errlen, "expression `%s`: symbol s%" PRId64 " is not bound by any earlier `in` line",
                         tok, arg);
                goto fail;
            }
            if (op == PX_VAL && (arg >= PLUS_MAX_V || !(vmask >> arg & 1u))) {
                snprintf(err, errlen, "expression `%s`: value v%" PRId64 " is not set by an earlier `val` line",
                         tok, arg);
                goto fail;
            }
        } else if (op < 0) {
            if (parse_literal(p, n, &arg)) {
                snprintf(err, errlen, "expression `%s`: bad item `%.*s`", tok, (int)n, p);
                goto fail;
            }
            op = PX_LIT;
        }
        int a = arity(op);
        if (depth < a) {
            snprintf(err, errlen, "expression `%s`: operator `%.*s` needs %d operand%s", tok, (int)n, p, a,
                     a > 1 ? "s" : "");
            goto fail;
        }
        depth += 1 - a;
        if (depth > PLUS_MAX_STACK) {
            snprintf(err, errlen, "expression `%s`: deeper than %d", tok, PLUS_MAX_STACK);
            goto fail;
        }
        if (push_item(plan, op, arg)) {
            snprintf(err, errlen, "out of memory");
            goto fail;
        }
        if (!q) break;
        p = q + 1;
    }
    if (depth != 1) {
        snprintf(err, errlen, "expression `%s`: leaves %d values, expected 1", tok, depth);
        goto fail;
    }
    out->off = start;
    out->n = plan->n_items - start;
    return 0;
fail:
    plan->n_items = start;
    return -1;
}

void plus_expr_text(const plus_plan* plan, plus_expr e, char* buf, size_t n) {
    size_t len = 0;
    if (n) buf[0] = 0;
    for (int i = 0; i < e.n && len + 1 < n; i++) {
        const plus_item* it = &plan->items[e.off + i];
        const char* name = NULL;
        for (size_t k = 0; k < sizeof OPS / sizeof OPS[0]; k++)
            if (OPS[k].op == it->op) name = OPS[k].name;
        int w = it->op == PX_LIT ? snprintf(buf + len, n - len, "%s%" PRId64, i ? "," : "", it->arg)
                : it->op == PX_SYM ? snprintf(buf + len, n - len, "%ss%" PRId64, i ? "," : "", it->arg)
                : it->op == PX_VAL ? snprintf(buf + len, n - len, "%sv%" PRId64, i ? "," : "", it->arg)
                : snprintf(buf + len, n - len, "%s%s", i ? "," : "", name ? name : "?");
        if (w < 0) break;
        len += (size_t)w < n - len ? (size_t)w : n - len - 1;
    }
}

/* Floor division / modulo (the contract's operands are non-negative; negatives round down). */
static int64_t floordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

int plus_expr_eval(const plus_plan* plan, plus_expr e, const plus_env* env, int64_t* out, char* err,
                   size_t errlen) {
    int64_t st[PLUS_MAX_STACK];
    int sp = 0;
    const char* what = NULL;
    for (int i = 0; i < e.n; i++) {
        const plus_item* it = &plan->items[e.off + i];
        int64_t a, b, c, r = 0;
        switch (it->op) {
        case PX_LIT: st[sp++] = it->arg; continue;
        case PX_SYM:
            if (!(env->bound >> it->arg & 1u)) {
                snprintf(err, errlen, "symbol s%" PRId64 "%s%s%s is unbound (its input is absent)", it->arg,
                         plan->sym_name[it->arg][0] ? " (" : "", plan->sym_name[it->arg],
                         plan->sym_name[it->arg][0] ? ")" : "");
                goto fail_msg;
            }
            st[sp++] = env->sym[it->arg];
            continue;
        case PX_VAL: st[sp++] = env->v[it->arg]; continue;
        case PX_NOT: st[sp - 1] = !st[sp - 1]; continue;
        case PX_TERN:
            c = st[sp - 3], a = st[sp - 2], b = st[sp - 1];
            sp -= 2;
            st[sp - 1] = c ? a : b;
            continue;
        default: break;
        }
        a = st[sp - 2], b = st[sp - 1];
        switch (it->op) {
        case PX_ADD: if (__builtin_add_overflow(a, b, &r)) what = "overflow in +"; break;
        case PX_SUB: if (__builtin_sub_overflow(a, b, &r)) what = "overflow in -"; break;
        case PX_MUL: if (__builtin_mul_overflow(a, b, &r)) what = "overflow in *"; break;
        case PX_DIV: case PX_MOD: case PX_CDIV:
            if (b == 0) { what = "division by zero"; break; }
            if (b == -1 && a == INT64_MIN) { what = "overflow in division"; break; }
            if (it->op == PX_DIV) r = floordiv(a, b);
            else if (it->op == PX_MOD) {   /* a % b shifted into b's sign (a - floordiv(a,b)*b overflows near INT64_MIN) */
                r = a % b;
                if (r != 0 && ((r < 0) != (b < 0))) r += b;
            }
            else if (a == INT64_MIN) what = "overflow in cdiv";
            else r = -floordiv(-a, b);
            break;
        case PX_MIN: r = a < b ? a : b; break;
        case PX_MAX: r = a > b ? a : b; break;
        case PX_LT: r = a < b; break;
        case PX_LE: r = a <= b; break;
        case PX_GT: r = a > b; break;
        case PX_GE: r = a >= b; break;
        case PX_EQ: r = a == b; break;
        case PX_NE: r = a != b; break;
        case PX_AND: r = a && b; break;
        case PX_OR: r = a || b; break;
        }
        if (what) {
            snprintf(err, errlen, "%s (operands %" PRId64 ", %" PRId64 ")", what, a, b);
            goto fail_msg;
        }
        st[--sp - 1] = r;
    }
    *out = st[0];
    return 0;
fail_msg:;
    /* Append where the expression lives. */
    size_t n = strlen(err);
    if (e.line > 0 && n < errlen)
        snprintf(err + n, errlen - n, " evaluating plan line %d `%s`", e.line, plus_plan_line(plan, e.line));
    return -1;
}
