/* Tensor maps of a plan's kernel lines: the `tmap` record, the bind-time bounds proof, the launch-time
 * encoding through cuTensorMapEncodeTiled (tmap.h; kernels/CONTRACT.md §3). */
#define _POSIX_C_SOURCE 200809L
#include "tmap.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* C API element type -> CUtensorMapDataType (-1: none). */
static int cu_type(int dtype) {
    switch (dtype) {
    case 1: return 7;              /* float -> FLOAT32 */
    case 2: case 3: return 0;      /* uint8, int8 -> UINT8 (bytes) */
    case 4: case 5: return 1;      /* uint16, int16 -> UINT16 */
    case 6: return 3;              /* int32 */
    case 7: return 5;              /* int64 */
    case 10: return 6;             /* float16 */
    case 11: return 8;             /* double */
    case 12: return 2;             /* uint32 */
    case 13: return 4;             /* uint64 */
    case 16: return 9;             /* bfloat16 */
    default: return -1;
    }
}

static int int_tok(const char* s, long long lo, long long hi, long long* out) {
    char* end;
    if (!*s) return -1;
    long long v = strtoll(s, &end, 10);
    if (*end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int record(plus_plan* p, int k, char** tok, int nt, int line, uint32_t vmask, char* err, size_t errlen) {
    plus_tmaps* ts = p->tmaps;
    int count = 0;
    for (int i = 0; i < ts->n; i++) count += ts->t[i].kernel == k;
    if (count == PLUS_TMAPS_PER_KERNEL)
        return snprintf(err, errlen, "more than %d tmap records for one kernel line", PLUS_TMAPS_PER_KERNEL), -1;
    long long v;
    if (nt < 6) return snprintf(err, errlen, "expected `tmap <dtype> <rank> in|out|scratch <i> <offset> <dims> <strides> <box> <swizzle>`"), -1;
    plus_tmap_spec* t = &ts->t[ts->n];
    memset(t, 0, sizeof *t);
    if (int_tok(tok[1], 1, 64, &v) || (t->dtype = plus_dtype_from_onnx((int)v)) < 0 || (t->cu_dtype = cu_type(t->dtype)) < 0)
        return snprintf(err, errlen, "dtype `%s` has no tensor-map element type", tok[1]), -1;
    t->esize = plus_dtype_bits(t->dtype) / 8;
    if (int_tok(tok[2], 1, PLUS_TMAP_RANK, &v)) return snprintf(err, errlen, "rank `%s` must be 1 to %d", tok[2], PLUS_TMAP_RANK), -1;
    t->rank = (int)v;
    if (nt != 6 + 3 * t->rank)
        return snprintf(err, errlen, "rank %d takes %d fields (dims, strides of dims 1.., box, swizzle), got %d", t->rank,
                        6 + 3 * t->rank, nt), -1;
    if (!strcmp(tok[3], "in")) t->buf = PLUS_TMAP_IN;
    else if (!strcmp(tok[3], "out")) t->buf = PLUS_TMAP_OUT;
    else if (!strcmp(tok[3], "scratch")) t->buf = PLUS_TMAP_SCRATCH;
    else return snprintf(err, errlen, "expected `in`, `out` or `scratch`, got `%s`", tok[3]), -1;
    int limit = t->buf == PLUS_TMAP_IN ? p->n_in : t->buf == PLUS_TMAP_OUT ? p->n_out : PLUS_MAX_SCRATCH;
    if (int_tok(tok[4], 0, limit - 1, &v))
        return snprintf(err, errlen, "%s index `%s` names no declared tensor (%d)", tok[3], tok[4], limit), -1;
    t->index = (int)v;
    if (t->buf == PLUS_TMAP_IN && p->in[t->index].dtype != t->dtype)
        return snprintf(err, errlen, "dtype differs from input %d's (plan line %d)", t->index, p->in[t->index].line), -1;
    if (t->buf == PLUS_TMAP_OUT && p->out[t->index].dtype != t->dtype)
        return snprintf(err, errlen, "dtype differs from output %d's (plan line %d)", t->index, p->out[t->index].line), -1;
    char msg[PLUS_ERR_LEN];
    int f = 5;
    plus_expr* es[1 + 2 * PLUS_TMAP_RANK];
    int ne = 0;
    es[ne++] = &t->offset;
    for (int d = 0; d < t->rank; d++) es[ne++] = &t->dim[d];
    for (int d = 1; d < t->rank; d++) es[ne++] = &t->stride[d];
    for (int i = 0; i < ne; i++, f++) {
        if (plus_expr_compile(p, tok[f], p->n_sym, vmask, es[i], msg, sizeof msg))
            return snprintf(err, errlen, "%s", msg), -1;
        es[i]->line = line;
    }
    for (int d = 0; d < t->rank; d++, f++) {
        if (int_tok(tok[f], 1, 256, &v)) return snprintf(err, errlen, "box dim %d `%s` must be 1 to 256", d, tok[f]), -1;
        t->box[d] = (unsigned)v;
    }
    if (int_tok(tok[f], 0, 128, &v) || (v != 0 && v != 32 && v != 64 && v != 128))
        return snprintf(err, errlen, "swizzle `%s` must be 0, 32, 64 or 128 (bytes)", tok[f]), -1;
    t->swizzle = (int)v;
    long long inner = (long long)t->box[0] * t->esize;
    if (inner % 16) return snprintf(err, errlen, "the box's inner dimension is %lld bytes, not a multiple of 16", inner), -1;
    if (t->swizzle && inner > t->swizzle)
        return snprintf(err, errlen, "the box's inner dimension (%lld bytes) exceeds the %d-byte swizzle", inner, t->swizzle), -1;
    t->kernel = k;
    t->line = line;
    ts->n++;
    return 0;
}

int plus_tmap_parse(plus_plan* p, char* err, size_t errlen) {
    if (!p->n_tmap_lines || p->tmaps) return 0;
    if (!(p->tmaps = calloc(1, sizeof *p->tmaps))) return snprintf(err, errlen, "out of memory"), -1;
    uint32_t vmask = 0;                               /* every value slot a `val` line sets */
    for (int i = 0; i < p->n_val; i++) vmask |= 1u << p->val_slot[i];
    for (int i = 0; i < p->n_tmap_lines; i++) {
        const int line = p->tmap_line[i];
        char work[4096], *tok[64], *save = NULL;
        int nt = 0;
        snprintf(work, sizeof work, "%s", plus_plan_line(p, line));
        for (char* s = strtok_r(work, " ", &save); s && nt < 64; s = strtok_r(NULL, " ", &save)) tok[nt++] = s;
        char msg[PLUS_ERR_LEN];
        if (record(p, p->tmap_kernel[i], tok, nt, line, vmask, msg, sizeof msg)) {
            snprintf(err, errlen, "plus_plan line %d `%s`: %s", line, plus_plan_line(p, line), msg);
            free(p->tmaps);
            p->tmaps = NULL;
            return -1;
        }
    }
    return 0;
}

/* Evaluated dims (elements) and strides (elements, [0] = 1) of map t. */
static int eval_map(const plus_plan* p, const plus_tmap_spec* t, const plus_env* env, int64_t* off, int64_t* dim,
                    int64_t* stride, char* err, size_t errlen) {
    if (plus_expr_eval(p, t->offset, env, off, err, errlen)) return -1;
    stride[0] = 1;
    for (int d = 0; d < t->rank; d++) {
        if (plus_expr_eval(p, t->dim[d], env, &dim[d], err, errlen)) return -1;
        if (d && plus_expr_eval(p, t->stride[d], env, &stride[d], err, errlen)) return -1;
    }
    return 0;
}

static int empty_map(const int64_t* dim, int rank) {
    for (int d = 0; d < rank; d++)
        if (dim[d] <= 0) return 1;
    return 0;
}

static const char* buf_name(int buf) { return buf == PLUS_TMAP_IN ? "input" : buf == PLUS_TMAP_OUT ? "output" : "scratch"; }

int plus_tmap_check(const plus_plan* p, const plus_env* env, const int* group_route, const int64_t* in_elems,
                    size_t n_in, const int64_t* out_elems, const int64_t* scratch_bytes, const char* const* names,
                    char* err, size_t errlen) {
    if (!p->tmaps) return 0;
    for (int i = 0; i < p->tmaps->n; i++) {
        const plus_tmap_spec* t = &p->tmaps->t[i];
        const plus_kernel_spec* ks = &p->kernel[t->kernel];
        int bound = 0;
        for (int g = 0; g < p->n_groups; g++) bound |= group_route[g] == ks->route;
        if (!bound) continue;
        int64_t off, dim[PLUS_TMAP_RANK], stride[PLUS_TMAP_RANK];
        if (eval_map(p, t, env, &off, dim, stride, err, errlen)) return -1;
        if (empty_map(dim, t->rank)) continue;
        int64_t have;
        const char* name = "";
        if (t->buf == PLUS_TMAP_IN) {
            if ((size_t)t->index >= n_in || in_elems[t->index] < 0) continue;   /* absent: an all-zero map */
            have = in_elems[t->index];
            if (names && names[t->index]) name = names[t->index];
        } else if (t->buf == PLUS_TMAP_OUT) {
            have = out_elems[t->index];
        } else {
            have = scratch_bytes[t->index] / t->esize;
        }
        /* the driver's rules: strides in bytes multiples of 16, dims not overlapping (stride[d] >= dim[d-1] x
         * stride[d-1]); then the last element the map covers must lie inside the tensor */
        int64_t last = off;
        for (int d = 0; d < t->rank; d++) {
            if (d && ((stride[d] * t->esize) % 16 || stride[d] < dim[d - 1] * stride[d - 1])) {
                snprintf(err, errlen, "tensor map %d of kernel `%s` (plan line %d `%s`): stride %" PRId64 " of dim %d "
                         "is not a multiple of 16 bytes or overlaps dim %d (%" PRId64 " x %" PRId64 " elements)", i,
                         ks->entry, t->line, plus_plan_line(p, t->line), stride[d], d, d - 1, dim[d - 1], stride[d - 1]);
                return -1;
            }
            if (dim[d] > ((int64_t)1 << 32)) {
                snprintf(err, errlen, "tensor map %d of kernel `%s` (plan line %d): dim %d = %" PRId64 " exceeds 2^32",
                         i, ks->entry, t->line, d, dim[d]);
                return -1;
            }
            last += (dim[d] - 1) * stride[d];
        }
        if (off < 0 || (off * t->esize) % 16 || last >= have) {
            snprintf(err, errlen, "tensor map %d of kernel `%s` (plan line %d `%s`) covers elements [%" PRId64 ", %" PRId64
                     "] of %s %d%s%s%s, which has %" PRId64 " elements (or starts off a 16-byte boundary): the map "
                     "would reach outside the tensor", i, ks->entry, t->line, plus_plan_line(p, t->line), off, last,
                     buf_name(t->buf), t->index, name[0] ? " '" : "", name, name[0] ? "'" : "", have);
            return -1;
        }
    }
    return 0;
}

int plus_tmap_encode(const plus_plan* p, int k, const plus_driver* d, const plus_env* env, const PlusArgs* args,
                     void* maps, int* n, char* err, size_t errlen) {
    *n = 0;
    if (!p->tmaps) return 0;
    for (int i = 0; i < p->tmaps->n; i++) {
        const plus_tmap_spec* t = &p->tmaps->t[i];
        if (t->kernel != k) continue;
        unsigned char* out = (unsigned char*)maps + (size_t)(*n)++ * PLUS_TMAP_BYTES;
        memset(out, 0, PLUS_TMAP_BYTES);
        int64_t off, dim[PLUS_TMAP_RANK], stride[PLUS_TMAP_RANK];
        if (eval_map(p, t, env, &off, dim, stride, err, errlen)) return -1;
        const void* base = t->buf == PLUS_TMAP_IN ? args->in[t->index] : t->buf == PLUS_TMAP_OUT ? args->out[t->index]
                                                                                                : args->scratch[t->index];
        if (!base || empty_map(dim, t->rank)) continue;            /* all zero: never used by the kernel */
        uintptr_t addr = (uintptr_t)base + (uintptr_t)(off * t->esize);
        const plus_kernel_spec* ks = &p->kernel[k];
        if (addr % 16) {
            snprintf(err, errlen, "tensor map %d of kernel `%s` (plan line %d): %s %d starts at %#" PRIxPTR ", not on a "
                     "16-byte boundary (TMA needs one)", i, ks->entry, t->line, buf_name(t->buf), t->index, addr);
            return -1;
        }
        if (!d->cuTensorMapEncodeTiled) {
            snprintf(err, errlen, "kernel `%s` needs tensor maps but the CUDA driver lacks cuTensorMapEncodeTiled "
                     "(CUDA 12.0 or newer)", ks->entry);
            return -1;
        }
        unsigned long long gdim[PLUS_TMAP_RANK], gstride[PLUS_TMAP_RANK];
        unsigned estride[PLUS_TMAP_RANK];
        for (int j = 0; j < t->rank; j++) {
            gdim[j] = (unsigned long long)dim[j];
            estride[j] = 1;
            if (j) gstride[j - 1] = (unsigned long long)(stride[j] * t->esize);
        }
        int swz = t->swizzle == 128 ? 3 : t->swizzle == 64 ? 2 : t->swizzle == 32 ? 1 : 0;
        CUresult r = d->cuTensorMapEncodeTiled(out, t->cu_dtype, (unsigned)t->rank, (void*)addr, gdim, gstride, t->box,
                                               estride, 0 /* interleave none */, swz, 3 /* L2 promotion 256B */,
                                               0 /* OOB fill zero */);
        if (r) {
            char e[PLUS_ERR_LEN / 2];
            plus_cu_error(d, r, e, sizeof e);
            snprintf(err, errlen, "cuTensorMapEncodeTiled for tensor map %d of kernel `%s` (plan line %d `%s`) failed: %s",
                     i, ks->entry, t->line, plus_plan_line(p, t->line), e);
            return -1;
        }
    }
    return 0;
}
