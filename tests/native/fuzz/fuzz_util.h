/* Shared by the libFuzzer harnesses in tests/native/fuzz (tests only): reading a fuzz input as a
 * stream of fields, and inputs that agree with a parsed plan unless the fuzzer says otherwise.
 *
 * Every buffer the code under test reads is its own heap block of exactly the size the data implies,
 * so AddressSanitizer reports a read one byte past what the launcher was handed. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bind.h"
#include "kernel.h"   /* plus_pack_src */

typedef struct { const uint8_t* p; size_t n; } fz_in;

static inline uint8_t fz_u8(fz_in* in) {
    if (!in->n) return 0;
    in->n--;
    return *in->p++;
}

static inline uint64_t fz_bytes_le(fz_in* in, int k) {
    uint64_t v = 0;
    for (int i = 0; i < k; i++) v |= (uint64_t)fz_u8(in) << (8 * i);
    return v;
}

/* A NUL-terminated copy of the input up to the next NUL (or its end); the input moves past the NUL. */
static inline char* fz_cstr(fz_in* in) {
    const uint8_t* z = memchr(in->p, 0, in->n);
    size_t len = z ? (size_t)(z - in->p) : in->n;
    char* s = malloc(len + 1);
    if (!s) abort();
    memcpy(s, in->p, len);
    s[len] = 0;
    in->p += len + (z != NULL);
    in->n -= len + (z != NULL);
    return s;
}

/* `len` bytes (fewer at the end of the input) in a heap block of exactly that size (1 when empty). */
static inline uint8_t* fz_blob(fz_in* in, size_t len, size_t* got) {
    if (len > in->n) len = in->n;
    uint8_t* b = malloc(len ? len : 1);
    if (!b) abort();
    memcpy(b, in->p, len);
    in->p += len;
    in->n -= len;
    *got = len;
    return b;
}

/* A dimension: mostly small, sometimes an edge value ORT would never send but a hostile host could. */
static inline int64_t fz_dim(fz_in* in) {
    uint8_t b = fz_u8(in);
    if (b < 0xF0) return b % 40;
    switch (b) {
    case 0xF0: return -1;
    case 0xF1: return INT64_MAX;
    case 0xF2: return INT64_MIN;
    case 0xF3: return (int64_t)1 << 31;
    case 0xF4: return 65536;
    case 0xF5: return 1025;
    default: return (int64_t)fz_bytes_le(in, 8);
    }
}

/* Element bytes of an ORT element type for host buffers (0 for strings / unknown). */
static inline size_t fz_elsize(int dtype) {
    int bits = plus_dtype_bits(dtype);
    return bits >= 8 ? (size_t)bits / 8 : bits ? 1 : 0;
}

/* Cap on the elements of one host buffer the harnesses allocate (bigger shapes get no data). */
#define FZ_MAX_ELEMS 4096
#define FZ_INLINE_ELEMS 16   /* tensors up to this many elements take their values from the input */

/* Fill `n` bytes from one seed byte of the input (xorshift): bulk data without bulk input. */
static inline void fz_fill(fz_in* in, uint8_t* p, size_t n) {
    uint32_t x = 0x9E3779B9u ^ fz_u8(in);
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        p[i] = (uint8_t)x;
    }
}

/* Elements of a shape, or -1 when negative, overflowing or above FZ_MAX_ELEMS. */
static inline long long fz_elems(const int64_t* dims, int rank) {
    long long n = 1;
    for (int d = 0; d < rank; d++) {
        if (dims[d] < 0 || __builtin_mul_overflow(n, (long long)dims[d], &n)) return -1;
    }
    return n <= FZ_MAX_ELEMS ? n : -1;
}

/* The plan text up to the input's next NUL, parsed into *p: the text (free it after plus_plan_free(p)),
 * or NULL when the parser refused it (nothing to free; a refusal's message is always NUL-terminated,
 * else abort: a finding). */
static inline char* fz_plan(fz_in* in, plus_plan* p) {
    char* text = fz_cstr(in);
    char err[PLUS_ERR_LEN];
    if (plus_plan_parse(text, p, err, sizeof err)) {
        if (!memchr(err, 0, sizeof err)) abort();
        free(text);
        return NULL;
    }
    return text;
}

/* Image packs as a host hands them over: a count byte (0 to 4 packs), per pack an arch name NUL, a
 * uint16 LE length and that many bytes (each name and image its own heap block; fz_free_packs). */
typedef struct {
    int n;
    char* arch[4];
    uint8_t* blob[4];
    plus_pack_src src[4];
} fz_packs;

static inline void fz_read_packs(fz_in* in, fz_packs* k) {
    k->n = fz_u8(in) % 5;
    for (int i = 0; i < k->n; i++) {
        k->arch[i] = fz_cstr(in);
        size_t len = (size_t)fz_bytes_le(in, 2), got;
        k->blob[i] = fz_blob(in, len, &got);
        k->src[i] = (plus_pack_src){.arch = k->arch[i], .data = k->blob[i], .size = got};
    }
}

static inline void fz_free_packs(fz_packs* k) {
    for (int i = 0; i < k->n; i++) free(k->arch[i]), free(k->blob[i]);
}

/* ---- run inputs for a parsed plan ----
 * Per plan input one control byte decides what deviates from the plan: absent (low three bits all
 * set), another element type (0x08), another rank (0x10), literal dims not honoured (0x20), symbols
 * not kept consistent across inputs (0x40), a shape tensor not handed over in host memory (0x80). A
 * leading byte 0xFF drops the last input, 0xFE adds one. Data buffers hold exactly the elements the
 * dims give (none above FZ_MAX_ELEMS): up to FZ_INLINE_ELEMS elements are fuzzed dims each (what a
 * shape tensor holds), bigger tensors are filled from one seed byte. */
typedef struct {
    plus_tensor_desc desc[PLUS_MAX_IN + 1];
    int64_t* dims[PLUS_MAX_IN + 1];
    void* data[PLUS_MAX_IN + 1];
    size_t bytes[PLUS_MAX_IN + 1];
    size_t n;
} fz_tensors;

static inline void fz_make_inputs(fz_in* in, const plus_plan* p, fz_tensors* t) {
    memset(t, 0, sizeof *t);
    int64_t symv[PLUS_MAX_SYM];
    for (int k = 0; k < PLUS_MAX_SYM; k++) symv[k] = -1;
    uint8_t lead = fz_u8(in);
    size_t n = (size_t)p->n_in;
    if (lead == 0xFF && n > 0) n--;
    else if (lead == 0xFE) n++;
    t->n = n;
    for (size_t i = 0; i < n; i++) {
        const plus_in_spec* s = i < (size_t)p->n_in ? &p->in[i] : &p->in[0];
        uint8_t c = fz_u8(in);
        plus_tensor_desc* d = &t->desc[i];
        d->present = (c & 7) != 7;
        d->dtype = c & 0x08 ? fz_u8(in) % 28 : s->dtype;
        d->rank = c & 0x10 ? fz_u8(in) % (PLUS_MAX_RANK + 1) : s->rank;
        t->dims[i] = malloc(sizeof(int64_t) * (d->rank ? (size_t)d->rank : 1));
        if (!t->dims[i]) abort();
        for (int k = 0; k < d->rank; k++) {
            int64_t x;
            if (k < s->rank && s->kind[k] == PLUS_DIM_LIT && !(c & 0x20)) {
                x = s->val[k];
            } else if (k < s->rank && s->kind[k] == PLUS_DIM_SYM && symv[s->val[k]] >= 0 && !(c & 0x40)) {
                x = symv[s->val[k]];
            } else {
                x = fz_dim(in);
                if (k < s->rank && s->kind[k] == PLUS_DIM_SYM && symv[s->val[k]] < 0) symv[s->val[k]] = x;
            }
            t->dims[i][k] = x;
        }
        d->dims = t->dims[i];
        long long elems = fz_elems(t->dims[i], d->rank);
        size_t es = fz_elsize(d->dtype);
        if (d->present && elems >= 0 && es) {
            t->bytes[i] = (size_t)elems * es;
            t->data[i] = malloc(t->bytes[i] ? t->bytes[i] : 1);
            if (!t->data[i]) abort();
            if (elems > FZ_INLINE_ELEMS) fz_fill(in, t->data[i], t->bytes[i]);
            else for (long long e = 0; e < elems; e++) {
                int64_t v = fz_dim(in);
                if (es == 8) memcpy((char*)t->data[i] + e * 8, &v, 8);
                else if (es == 4) { int32_t w = (int32_t)v; memcpy((char*)t->data[i] + e * 4, &w, 4); }
                else if (es == 2) { int16_t w = (int16_t)v; memcpy((char*)t->data[i] + e * 2, &w, 2); }
                else ((uint8_t*)t->data[i])[e] = (uint8_t)v;
            }
        }
        if (d->present && i < (size_t)p->n_in && s->host && !(c & 0x80)) d->host = t->data[i];
    }
}

static inline void fz_free_inputs(fz_tensors* t) {
    for (size_t i = 0; i < t->n; i++) free(t->dims[i]), free(t->data[i]);
}
