/* Parse the `plus_plan` node attribute (CONTRACT.md §3) into a plus_plan. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

#define MAX_TOKENS 64

typedef struct {
    plus_plan* plan;
    int line;               /* 1-based */
    char* tok[MAX_TOKENS];
    int nt;
    char* err;
    size_t errlen;
    uint32_t vmask;         /* value slots set so far (what a `val` expression may read) */
    uint32_t all_vmask;     /* value slots set by any `val` line (read after all of them run) */
    int route_seen[PLUS_MAX_ROUTES];
    int node_seen, out_seen[PLUS_MAX_OUT], in_seen[PLUS_MAX_IN];
} parser;

const char* plus_plan_line(const plus_plan* plan, int line) {
    return plan->lines && line >= 1 && line <= plan->n_lines ? plan->lines[line - 1] : "";
}

static int fail(parser* ps, const char* fmt, ...) {
    int n = snprintf(ps->err, ps->errlen, "plus_plan line %d `%s`: ", ps->line,
                     plus_plan_line(ps->plan, ps->line));
    if (n < 0 || (size_t)n >= ps->errlen) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ps->err + n, ps->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

static int need(parser* ps, int n) {
    if (ps->nt != n)
        return fail(ps, "expected %d fields, got %d", n, ps->nt);
    return 0;
}

/* Parse tok[i] as an integer in [lo, hi]. */
static int index_tok(parser* ps, int i, int64_t lo, int64_t hi, const char* what, int64_t* out) {
    char* end;
    const char* s = ps->tok[i];
    if ((*s < '0' || *s > '9') && !(*s == '-' && s[1] >= '0' && s[1] <= '9'))
        return fail(ps, "%s `%s` is not an integer", what, s);
    long long v = strtoll(s, &end, 10);
    if (*end) return fail(ps, "%s `%s` is not an integer", what, s);
    if (v < lo || v > hi) return fail(ps, "%s %lld out of range [%" PRId64 ", %" PRId64 "]", what, v, lo, hi);
    *out = v;
    return 0;
}

static int name_tok(parser* ps, int i, char* dst, const char* what) {
    if (strlen(ps->tok[i]) >= PLUS_NAME_LEN) return fail(ps, "%s longer than %d bytes", what, PLUS_NAME_LEN - 1);
    strcpy(dst, ps->tok[i]);
    return 0;
}

static int expr_tok(parser* ps, int i, int nsym, uint32_t vmask, plus_expr* e) {
    char msg[PLUS_ERR_LEN];
    if (plus_expr_compile(ps->plan, ps->tok[i], nsym, vmask, e, msg, sizeof msg)) return fail(ps, "%s", msg);
    e->line = ps->line;
    return 0;
}

static int dtype_tok(parser* ps, int i, int* out) {
    int64_t v;
    if (index_tok(ps, i, 1, 64, "dtype", &v)) return -1;
    int d = plus_dtype_from_onnx((int)v);
    if (d < 0) return fail(ps, "unknown ONNX dtype %" PRId64, v);
    if (!plus_dtype_bits(d)) return fail(ps, "dtype %" PRId64 " (%s) has no fixed size: no kernel takes it", v, plus_dtype_name(d));
    *out = d;
    return 0;
}

static int rank_tok(parser* ps, int i, int* out) {
    int64_t r;
    if (index_tok(ps, i, 0, PLUS_MAX_RANK, "rank", &r)) return -1;
    if (ps->nt != i + 1 + (int)r) return fail(ps, "rank %" PRId64 " needs %" PRId64 " dims, got %d", r, r, ps->nt - i - 1);
    *out = (int)r;
    return 0;
}

static int rec_in(parser* ps) {
    plus_plan* p = ps->plan;
    int64_t i;
    if (ps->nt < 4) return fail(ps, "expected `in <i> <dtype> <rank> <dims...>`");
    if (index_tok(ps, 1, 0, PLUS_MAX_IN - 1, "input index", &i)) return -1;
    if (i != p->n_in) return fail(ps, "input %" PRId64 " out of order (expected input %d)", i, p->n_in);
    plus_in_spec* s = &p->in[i];
    if (dtype_tok(ps, 2, &s->dtype) || rank_tok(ps, 3, &s->rank)) return -1;
    for (int d = 0; d < s->rank; d++) {
        const char* t = ps->tok[4 + d];
        if (!strcmp(t, "*")) {
            s->kind[d] = PLUS_DIM_ANY;
        } else if (strchr(t, ',')) {   /* an expression over symbols: checked after binding (bind.c) */
            char msg[PLUS_ERR_LEN];
            if (plus_expr_compile(p, t, PLUS_MAX_SYM, 0, &s->dexpr[d], msg, sizeof msg)) return fail(ps, "%s", msg);
            s->dexpr[d].line = ps->line;
            s->kind[d] = PLUS_DIM_EXPR;
        } else if (t[0] == 's') {
            char* end;
            if (t[1] < '0' || t[1] > '9') return fail(ps, "bad dim `%s`", t);
            long k = strtol(t + 1, &end, 10);
            if (*end || k < 0 || k >= PLUS_MAX_SYM) return fail(ps, "bad symbol `%s` (s0..s%d)", t, PLUS_MAX_SYM - 1);
            if (k > p->n_sym) return fail(ps, "symbol %s appears before s%d (symbols are numbered in order of first appearance)", t, p->n_sym);
            if (k == p->n_sym) p->n_sym++;
            s->kind[d] = PLUS_DIM_SYM;
            s->val[d] = k;
        } else {
            if (index_tok(ps, 4 + d, 0, INT64_MAX, "dim", &s->val[d])) return -1;
            s->kind[d] = PLUS_DIM_LIT;
        }
    }
    s->line = ps->line;
    p->n_in++;
    return 0;
}

static int rec_out(parser* ps) {
    plus_plan* p = ps->plan;
    int64_t i;
    if (ps->nt < 4) return fail(ps, "expected `out <i> <dtype> <rank> <exprs...>`");
    if (index_tok(ps, 1, 0, PLUS_MAX_OUT - 1, "output index", &i)) return -1;
    if (i != p->n_out) return fail(ps, "output %" PRId64 " out of order (expected output %d)", i, p->n_out);
    plus_out_spec* s = &p->out[i];
    if (dtype_tok(ps, 2, &s->dtype) || rank_tok(ps, 3, &s->rank)) return -1;
    for (int d = 0; d < s->rank; d++)
        if (expr_tok(ps, 4 + d, p->n_sym, ps->all_vmask, &s->dim[d])) return -1;
    s->line = ps->line;
    p->n_out++;
    return 0;
}

static int rec_val(parser* ps) {
    plus_plan* p = ps->plan;
    int64_t k;
    if (need(ps, 3) || index_tok(ps, 1, 0, PLUS_MAX_V - 1, "value slot", &k)) return -1;
    if (ps->vmask >> k & 1u) return fail(ps, "value slot %" PRId64 " set twice", k);
    if (expr_tok(ps, 2, p->n_sym, ps->vmask, &p->val[p->n_val])) return -1;
    p->val_slot[p->n_val++] = (int)k;
    ps->vmask |= 1u << k;
    return 0;
}

static int rec_scratch(parser* ps) {
    plus_plan* p = ps->plan;
    int64_t k;
    if (need(ps, 3) || index_tok(ps, 1, 0, PLUS_MAX_SCRATCH - 1, "scratch slot", &k)) return -1;
    if (p->has_scratch[k]) return fail(ps, "scratch %" PRId64 " given twice", k);
    if (expr_tok(ps, 2, p->n_sym, ps->all_vmask, &p->scratch[k])) return -1;
    p->has_scratch[k] = 1;
    return 0;
}

static int rec_route(parser* ps) {
    plus_plan* p = ps->plan;
    int64_t r;
    if (need(ps, 3) || index_tok(ps, 1, 0, PLUS_MAX_ROUTES - 1, "route", &r)) return -1;
    if (r != p->n_routes) return fail(ps, "route %" PRId64 " out of order (expected route %d)", r, p->n_routes);
    if (expr_tok(ps, 2, p->n_sym, ps->all_vmask, &p->route[r])) return -1;
    p->route_group[r] = p->n_groups ? p->n_groups - 1 : 0;
    p->n_routes++;
    return 0;
}

static int rec_kernel(parser* ps) {
    plus_plan* p = ps->plan;
    int64_t r, img;
    if (need(ps, 11)) return -1;
    if (p->n_kernels == PLUS_MAX_KERNELS) return fail(ps, "more than %d kernel lines", PLUS_MAX_KERNELS);
    plus_kernel_spec* k = &p->kernel[p->n_kernels];
    if (index_tok(ps, 1, 0, PLUS_MAX_ROUTES - 1, "route", &r)) return -1;
    if (r >= p->n_routes) return fail(ps, "route %" PRId64 " is not declared by an earlier `route` line", r);
    if (index_tok(ps, 2, 0, 65535, "image index", &img) || name_tok(ps, 3, k->entry, "entry name")) return -1;
    for (int i = 0; i < 3; i++)
        if (expr_tok(ps, 4 + i, p->n_sym, ps->all_vmask, &k->grid[i]) ||
            expr_tok(ps, 7 + i, p->n_sym, ps->all_vmask, &k->block[i]))
            return -1;
    if (expr_tok(ps, 10, p->n_sym, ps->all_vmask, &k->smem)) return -1;
    k->route = (int)r;
    k->image = (int)img;
    k->line = ps->line;
    p->n_kernels++;
    return 0;
}

/* `shapev <k> <input> <element> [<zero> [infer]]`: symbol k is element `element` of the values of
 * `input` (a rank-0/1 int64 or int32 shape tensor the launcher reads on the host). Binds k when no
 * earlier line did. `zero`: what a 0 element binds instead (an expression over earlier symbols), or `-`
 * (refused); `infer`: a 0 that binds 0 is refused (plan.h). */
static int rec_shapev(parser* ps) {
    plus_plan* p = ps->plan;
    int64_t k, i, e;
    if (ps->nt < 4 || ps->nt > 6 || (ps->nt == 6 && strcmp(ps->tok[5], "infer")))
        return fail(ps, "expected `shapev <sK> <i> <j> [<zero> [infer]]`");
    if (p->n_shapev == PLUS_MAX_SHAPEV) return fail(ps, "more than %d shapev lines", PLUS_MAX_SHAPEV);
    if (ps->tok[1][0] != 's') return fail(ps, "expected a symbol `sK`, got `%s`", ps->tok[1]);
    ps->tok[1]++;
    int rc = index_tok(ps, 1, 0, PLUS_MAX_SYM - 1, "symbol", &k);
    ps->tok[1]--;
    if (rc || index_tok(ps, 2, 0, PLUS_MAX_IN - 1, "input index", &i) ||
        index_tok(ps, 3, 0, PLUS_SHAPEV_ELEMS - 1, "element index", &e))
        return -1;
    if (k > p->n_sym)
        return fail(ps, "symbol s%" PRId64 " appears before s%d (symbols are numbered in order of first appearance)",
                    k, p->n_sym);
    if (i >= p->n_in) return fail(ps, "input %" PRId64 " is not declared by an earlier `in` line", i);
    plus_in_spec* s = &p->in[i];
    if ((s->dtype != 7 && s->dtype != 6) || s->rank > 1)
        return fail(ps, "input %" PRId64 " must be a rank-0 or rank-1 int64/int32 shape tensor (plan line %d)", i,
                    s->line);
    if (s->rank == 0 ? e != 0 : (s->kind[0] == PLUS_DIM_LIT && e >= s->val[0]))
        return fail(ps, "element %" PRId64 " lies outside input %" PRId64 " (plan line %d)", e, i, s->line);
    plus_shapev sv = {(int)k, (int)i, (int)e, ps->line, PLUS_ZERO_ASIS, ps->nt == 6, {0, 0, 0}};
    if (ps->nt >= 5) {   /* the expression reads symbols numbered before this line's */
        sv.zero = strcmp(ps->tok[4], "-") ? PLUS_ZERO_EXPR : PLUS_ZERO_REFUSE;
        if (sv.zero == PLUS_ZERO_EXPR && expr_tok(ps, 4, p->n_sym, 0, &sv.zexpr)) return -1;
    }
    if (k == p->n_sym) p->n_sym++;
    s->host = 1;
    p->shapev[p->n_shapev++] = sv;
    return 0;
}

/* `in` / `out` and an index naming a declared line: which=0 input, 1 output. */
static int io_tok(parser* ps, int* which, int64_t* index) {
    plus_plan* p = ps->plan;
    if (!strcmp(ps->tok[1], "in")) *which = 0;
    else if (!strcmp(ps->tok[1], "out")) *which = 1;
    else return fail(ps, "expected `in` or `out`, got `%s`", ps->tok[1]);
    int n = *which ? p->n_out : p->n_in;
    if (index_tok(ps, 2, 0, (*which ? PLUS_MAX_OUT : PLUS_MAX_IN) - 1, *which ? "output index" : "input index", index))
        return -1;
    if (*index >= n) return fail(ps, "%s %" PRId64 " is not declared by an earlier `%s` line",
                                 *which ? "output" : "input", *index, *which ? "out" : "in");
    return 0;
}

/* `extent in|out <i> <expr>`: the kernels read (in) or write (out) elements [0, expr) of that tensor;
 * the launcher checks its element count equals expr before any launch. */
static int rec_extent(parser* ps) {
    plus_plan* p = ps->plan;
    int which;
    int64_t i;
    if (need(ps, 4) || io_tok(ps, &which, &i)) return -1;
    if (p->n_extent == PLUS_MAX_EXTENTS) return fail(ps, "more than %d extent lines", PLUS_MAX_EXTENTS);
    plus_extent* x = &p->extent[p->n_extent];
    if (expr_tok(ps, 3, p->n_sym, 0, &x->e)) return -1;
    x->out = which;
    x->index = (int)i;
    p->n_extent++;
    return 0;
}

/* The last value of items [off, off+n): where it starts (reverse Polish, so a suffix); -1 if none. */
static int last_operand(const plus_plan* p, int off, int n) {
    int need = 1;
    for (int j = off + n - 1; j >= off; j--) {
        int op = p->items[j].op;
        int arity = op <= PX_VAL ? 0 : op == PX_NOT ? 1 : op == PX_TERN ? 3 : 2;
        need += arity - 1;
        if (need == 0) return j;
    }
    return -1;
}

/* `exact in|out <i> <d>`: dim d of that line is num/den (its expression ends in `/`), which must
 * divide exactly: ONNX Reshape semantics for a dim the rewrite took as a quotient (batch = batch_seq/seq). */
static int rec_exact(parser* ps) {
    plus_plan* p = ps->plan;
    int which;
    int64_t i, d;
    if (need(ps, 4) || io_tok(ps, &which, &i)) return -1;
    if (p->n_exact == PLUS_MAX_EXACT) return fail(ps, "more than %d exact lines", PLUS_MAX_EXACT);
    int rank = which ? p->out[i].rank : p->in[i].rank;
    if (index_tok(ps, 3, 0, rank - 1, "dim", &d)) return -1;
    plus_expr e;
    if (which) e = p->out[i].dim[d];
    else if (p->in[i].kind[d] == PLUS_DIM_EXPR) e = p->in[i].dexpr[d];
    else return fail(ps, "dim %" PRId64 " of input %" PRId64 " is not an expression", d, i);
    if (e.n < 3 || p->items[e.off + e.n - 1].op != PX_DIV)
        return fail(ps, "dim %" PRId64 " of %s %" PRId64 " is not a quotient (its expression must end in `/`)", d,
                    which ? "output" : "input", i);
    int den = last_operand(p, e.off, e.n - 1);
    if (den <= e.off) return fail(ps, "dim %" PRId64 ": malformed quotient", d);
    plus_exact* x = &p->exact[p->n_exact++];
    *x = (plus_exact){.out = which, .index = (int)i, .dim = (int)d, .line = ps->line};
    x->num = (plus_expr){e.off, den - e.off, e.line};
    x->den = (plus_expr){den, e.off + e.n - 1 - den, e.line};
    return 0;
}

/* `optional in|out <i>`: the node may be wired without that tensor ("" in ONNX). */
static int rec_optional(parser* ps) {
    plus_plan* p = ps->plan;
    int which;
    int64_t i;
    if (need(ps, 3) || io_tok(ps, &which, &i)) return -1;
    if (which) p->out_optional[i] = 1;
    else p->in_optional[i] = 1;
    return 0;
}

/* `bcast in <i> <d> <expr>`: dim d of input i, a symbol of its own, is 1 or expr (ONNX broadcasting;
 * the kernels read that input with stride 0 along d where it is 1). Checked after binding. */
static int rec_bcast(parser* ps) {
    plus_plan* p = ps->plan;
    int which;
    int64_t i, d;
    if (need(ps, 5) || io_tok(ps, &which, &i)) return -1;
    if (which) return fail(ps, "only inputs broadcast (`bcast in <i> <d> <expr>`)");
    if (p->n_bcast == PLUS_MAX_BCAST) return fail(ps, "more than %d bcast lines", PLUS_MAX_BCAST);
    if (index_tok(ps, 3, 0, p->in[i].rank - 1, "dim", &d)) return -1;
    if (p->in[i].kind[d] != PLUS_DIM_SYM)
        return fail(ps, "dim %" PRId64 " of input %" PRId64 " is not a symbol (plan line %d)", d, i, p->in[i].line);
    plus_bcast* x = &p->bcast[p->n_bcast];
    if (expr_tok(ps, 4, p->n_sym, 0, &x->e)) return -1;
    x->index = (int)i;
    x->dim = (int)d;
    x->line = ps->line;
    p->n_bcast++;
    return 0;
}

/* `equal <a> <b> <what...>`: two dims the rewrite took as equal; the rest of the line says where
 * (the ONNX node), for the error. Checked after binding. */
static int rec_equal(parser* ps) {
    plus_plan* p = ps->plan;
    if (ps->nt < 3) return fail(ps, "expected `equal <expr> <expr> <what>`");
    if (p->n_equal == PLUS_MAX_EQUAL) return fail(ps, "more than %d equal lines", PLUS_MAX_EQUAL);
    plus_equal* x = &p->equal[p->n_equal];
    if (expr_tok(ps, 1, p->n_sym, 0, &x->a) || expr_tok(ps, 2, p->n_sym, 0, &x->b)) return -1;
    x->line = ps->line;
    p->n_equal++;
    return 0;
}

/* `arch <a>...`: the routes that follow (up to the next `arch` record) serve the packs of these archs. */
static int rec_arch(parser* ps) {
    plus_plan* p = ps->plan;
    if (ps->nt < 2) return fail(ps, "expected `arch <sm_XY> ...`");
    if (p->n_groups == PLUS_MAX_GROUPS) return fail(ps, "more than %d `arch` records", PLUS_MAX_GROUPS);
    if (ps->nt - 1 > PLUS_MAX_ARCHS) return fail(ps, "more than %d archs", PLUS_MAX_ARCHS);
    if (p->n_groups && p->group_first[p->n_groups - 1] == p->n_routes)
        return fail(ps, "the previous `arch` record has no routes");
    if (!p->n_groups && p->n_routes) return fail(ps, "`route` lines before the first `arch` record");
    int g = p->n_groups++;
    p->group_first[g] = p->n_routes;
    for (int i = 1; i < ps->nt; i++) {
        const char* a = ps->tok[i];
        if (strncmp(a, "sm_", 3) || strlen(a) > 15 || a[3] < '1' || a[3] > '9')
            return fail(ps, "bad arch `%s` (expected sm_XY)", a);
        for (int h = 0; h < p->n_groups; h++)
            for (int j = 0; j < p->group_n_archs[h]; j++)
                if (!strcmp(p->group_arch[h][j], a)) return fail(ps, "arch %s is in two `arch` records", a);
        strcpy(p->group_arch[g][p->group_n_archs[g]++], a);
    }
    return 0;
}

static int rec_sym(parser* ps) {
    int64_t k;
    if (need(ps, 3) || index_tok(ps, 1, 0, PLUS_MAX_SYM - 1, "symbol", &k)) return -1;
    return name_tok(ps, 2, ps->plan->sym_name[k], "symbol name");
}

static int rec_archs(parser* ps) {
    plus_plan* p = ps->plan;
    if (ps->nt < 2) return fail(ps, "expected `archs <sm_XY> ...`");
    if (ps->nt - 1 > PLUS_MAX_ARCHS) return fail(ps, "more than %d archs", PLUS_MAX_ARCHS);
    if (p->n_archs) return fail(ps, "`archs` given twice");
    for (int i = 1; i < ps->nt; i++) {
        const char* a = ps->tok[i];
        if (strncmp(a, "sm_", 3) || strlen(a) > 16 || a[3] < '1' || a[3] > '9')
            return fail(ps, "bad arch `%s` (expected sm_XY)", a);
        strcpy(p->arch[p->n_archs++], a);
    }
    return 0;
}

/* Split the current line (in place) on single spaces. */
static int tokenize(parser* ps, char* s) {
    ps->nt = 0;
    for (;;) {
        if (ps->nt == MAX_TOKENS) return fail(ps, "more than %d fields", MAX_TOKENS);
        ps->tok[ps->nt++] = s;
        char* sp = strchr(s, ' ');
        if (!*s || (sp == s)) return fail(ps, "empty field (fields are separated by single spaces)");
        if (!sp) return 0;
        *sp = 0;
        s = sp + 1;
    }
}

int plus_plan_parse(const char* text, plus_plan* plan, char* err, size_t errlen) {
    memset(plan, 0, sizeof *plan);
    parser ps = {.plan = plan, .err = err, .errlen = errlen};
    size_t len = strlen(text);
    if (!len) {
        snprintf(err, errlen, "plus_plan is empty");
        return -1;
    }
    plan->text = malloc(len + 1);
    char* work = malloc(len + 1);
    plan->lines = malloc((len + 2) * sizeof(char*));
    if (!plan->text || !work || !plan->lines) {
        free(work);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    memcpy(plan->text, text, len + 1);
    for (char* s = plan->text;;) {             /* split into lines */
        plan->lines[plan->n_lines++] = s;
        char* nl = strchr(s, '\n');
        if (!nl) break;
        *nl = 0;
        s = nl + 1;
    }
    if (plan->n_lines > 1 && !*plan->lines[plan->n_lines - 1]) plan->n_lines--;   /* final newline */
    for (int i = 0; i < plan->n_lines; i++) {    /* which value slots the plan sets (`val <k> ...`) */
        const char* l = plan->lines[i];
        if (strncmp(l, "val ", 4)) continue;
        int k = 0, digits = 0;
        for (l += 4; *l >= '0' && *l <= '9' && digits < 3; l++, digits++) k = k * 10 + (*l - '0');
        if (digits && *l == ' ' && k < PLUS_MAX_V) ps.all_vmask |= 1u << k;
    }
    int ended = 0, rc = 0;
    for (int i = 0; i < plan->n_lines && !rc; i++) {
        ps.line = i + 1;
        const char* src = plan->lines[i];
        if (ended) { rc = fail(&ps, "text after `end`"); break; }
        if (strchr(src, '\r') || strchr(src, '\t')) { rc = fail(&ps, "tab or carriage return"); break; }
        strcpy(work, src);
        if (!strncmp(src, "node ", 5) && src[5]) {   /* the name is the rest of the line */
            ps.nt = 1;
            ps.tok[0] = "node";
        } else if ((rc = tokenize(&ps, work))) break;
        const char* kw = ps.tok[0];
        if (i == 0) {
            if (strcmp(kw, "plusplan") || ps.nt != 2 || strcmp(ps.tok[1], "1"))
                rc = fail(&ps, "the first line must be `plusplan 1`");
        } else if (!strcmp(kw, "plusplan")) rc = fail(&ps, "`plusplan` header repeated");
        else if (!strcmp(kw, "node")) {
            if (ps.node_seen++) rc = fail(&ps, "`node` given twice");
            else if (strncmp(src, "node ", 5) || !src[5]) rc = fail(&ps, "expected `node <name>`");
            else if (strlen(src) >= 5 + PLUS_NAME_LEN) rc = fail(&ps, "node name longer than %d bytes", PLUS_NAME_LEN - 1);
            else strcpy(plan->node, src + 5);   /* the rest of the line: names may hold spaces */
        } else if (!strcmp(kw, "in")) rc = rec_in(&ps);
        else if (!strcmp(kw, "out")) rc = rec_out(&ps);
        else if (!strcmp(kw, "val")) rc = rec_val(&ps);
        else if (!strcmp(kw, "scratch")) rc = rec_scratch(&ps);
        else if (!strcmp(kw, "route")) rc = rec_route(&ps);
        else if (!strcmp(kw, "kernel")) rc = rec_kernel(&ps);
        else if (!strcmp(kw, "sym")) rc = rec_sym(&ps);
        else if (!strcmp(kw, "shapev")) rc = rec_shapev(&ps);
        else if (!strcmp(kw, "archs")) rc = rec_archs(&ps);
        else if (!strcmp(kw, "arch")) rc = rec_arch(&ps);
        else if (!strcmp(kw, "extent")) rc = rec_extent(&ps);
        else if (!strcmp(kw, "exact")) rc = rec_exact(&ps);
        else if (!strcmp(kw, "optional")) rc = rec_optional(&ps);
        else if (!strcmp(kw, "bcast")) rc = rec_bcast(&ps);
        else if (!strcmp(kw, "equal")) rc = rec_equal(&ps);
        else if (!strcmp(kw, "tmap")) {         /* a tensor map of the kernel line above: tmap.c parses it */
            if (!plan->n_kernels) rc = fail(&ps, "a `tmap` record belongs to the `kernel` line above it; there is none");
            else if (plan->n_tmap_lines == PLUS_MAX_TMAP_LINES) rc = fail(&ps, "more than %d tmap records", PLUS_MAX_TMAP_LINES);
            else {
                plan->tmap_line[plan->n_tmap_lines] = ps.line;
                plan->tmap_kernel[plan->n_tmap_lines++] = plan->n_kernels - 1;
            }
        }
        else if (!strcmp(kw, "end")) rc = need(&ps, 1), ended = 1;
        else rc = fail(&ps, "unknown record `%s`", kw);
    }
    free(work);
    if (!rc && !ended) {
        ps.line = plan->n_lines;
        rc = fail(&ps, "missing `end` line (plan truncated?)");
    }
    if (!rc && plan->n_in == 0) rc = (snprintf(err, errlen, "plus_plan: no `in` lines"), -1);
    if (!rc && plan->n_out == 0) rc = (snprintf(err, errlen, "plus_plan: no `out` lines"), -1);
    if (!rc && plan->n_routes == 0) rc = (snprintf(err, errlen, "plus_plan: no `route` lines"), -1);
    for (int i = 0; i < plan->n_in && !rc; i++)   /* symbols in `in` expressions: numbered by some `in`/`shapev` */
        for (int d = 0; d < plan->in[i].rank && !rc; d++) {
            if (plan->in[i].kind[d] != PLUS_DIM_EXPR) continue;
            const plus_expr* e = &plan->in[i].dexpr[d];
            for (int j = 0; j < e->n && !rc; j++)
                if (plan->items[e->off + j].op == PX_SYM && plan->items[e->off + j].arg >= plan->n_sym) {
                    ps.line = plan->in[i].line;
                    rc = fail(&ps, "dim %d reads symbol s%" PRId64 ", which no `in` or `shapev` line binds", d,
                              plan->items[e->off + j].arg);
                }
        }
    for (int t = 0; t < plan->n_in + plan->n_out && !rc; t++) {   /* every tensor's extent: bounds before launch */
        int out = t >= plan->n_in, i = out ? t - plan->n_in : t, seen = 0;
        for (int j = 0; j < plan->n_extent && !seen; j++) seen = plan->extent[j].out == out && plan->extent[j].index == i;
        if (seen) continue;
        ps.line = out ? plan->out[i].line : plan->in[i].line;
        rc = fail(&ps, "no `extent %s %d` record: the plan predates the launcher's bounds checks (kernels/CONTRACT.md "
                  "§3), so nothing proves its launches stay inside that tensor; re-run `plus-ep rewrite` on the original "
                  "model", out ? "out" : "in", i);
    }
    if (!rc && plan->n_groups && plan->group_first[plan->n_groups - 1] == plan->n_routes)
        rc = (snprintf(err, errlen, "plus_plan: the last `arch` record has no routes"), -1);
    if (!rc && !plan->n_groups) plan->n_groups = 1;   /* one group of every route, serving every pack */
    if (rc) {
        plus_plan_free(plan);
        return -1;
    }
    return 0;
}

void plus_plan_free(plus_plan* plan) {
    free(plan->tmaps);
    plan->tmaps = NULL;
    free(plan->items);
    free(plan->text);
    free(plan->lines);
    plan->items = NULL;
    plan->text = NULL;
    plan->lines = NULL;
    plan->n_lines = 0;
}
