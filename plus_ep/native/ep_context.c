/* EPContext nodes for the PlusEP plugin EP: session options, the payload codec, writing the node (and its
 * side file) in Compile, reading it back. The format and the rules are in ep_context.h. */
#define _GNU_SOURCE
#include "ep_context.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ep_base.h"

/* OrtApi / OrtModelEditorApi slots this unit uses (shared/reference/ort-c-abi.md appendix; the model
 * editor table's order from ORT's model_editor_c_api.cc, unchanged since API 22). */
#define X(name, slot, ret, ...) typedef ret (*name##_fn)(__VA_ARGS__); enum { name##_slot = slot };
X(CreateOpAttr, 211, OrtStatus*, const char*, const void*, int, int, OrtOpAttr**)
X(ReleaseOpAttr, 212, void, OrtOpAttr*)
X(GetModelEditorApi, 291, const void*, void)
X(ME_CreateNode, 6, OrtStatus*, const char*, const char*, const char*, const char* const*, size_t,
  const char* const*, size_t, OrtOpAttr**, size_t, OrtNode**)
#undef X
enum { ORT_OP_ATTR_INT = 1 };

#define CTX_DOMAIN "com.microsoft"
#define CTX_OP "EPContext"

/* ---- session options ---- */

static OrtStatus* config_entry(const OrtSessionOptions* so, const char* key, char* buf, size_t n, int* found) {
    *found = 0;
    buf[0] = 0;
    if (!so) return NULL;
    int has = 0;
    OrtStatus* st = ORT_CALL(plus_ep_api, HasSessionConfigEntry)(so, key, &has);
    if (st || !has) return st;
    size_t size = n;
    st = ORT_CALL(plus_ep_api, GetSessionConfigEntry)(so, key, buf, &size);
    if (st) {
        plus_ep_drop(st);
        return plus_ep_status(ORT_INVALID_ARGUMENT, "PlusEP: session config entry %s is longer than %zu bytes", key,
                              n - 1);
    }
    *found = 1;
    return NULL;
}

OrtStatus* plus_ctx_read_config(const OrtSessionOptions* so, plus_ctx_config* out) {
    memset(out, 0, sizeof *out);
    out->embed = 1;   /* ORT's default for ep.context_embed_mode */
    char v[64];
    int found = 0;
    OrtStatus* st = config_entry(so, "ep.context_enable", v, sizeof v, &found);
    if (!st && found) {
        if (strcmp(v, "0") && strcmp(v, "1"))
            return plus_ep_status(ORT_INVALID_ARGUMENT, "PlusEP: ep.context_enable='%s': use '1' or '0'", v);
        out->enable = !strcmp(v, "1");
    }
    if (!st) st = config_entry(so, "ep.context_embed_mode", v, sizeof v, &found);
    if (!st && found) {
        if (strcmp(v, "0") && strcmp(v, "1"))
            return plus_ep_status(ORT_INVALID_ARGUMENT, "PlusEP: ep.context_embed_mode='%s': use '1' (the kernels in "
                                  "the model) or '0' (a file beside it)", v);
        out->embed = !strcmp(v, "1");
    }
    if (!st) st = config_entry(so, "ep.context_file_path", out->file_path, sizeof out->file_path, &found);
    return st;
}

/* ---- COBS (consistent-overhead byte stuffing): bytes without NUL, one code byte per 254 ---- */

static size_t cobs_bound(size_t n) { return n + n / 254 + 2; }

static size_t cobs_encode(const uint8_t* in, size_t n, uint8_t* out) {
    size_t o = 0, code_at = o++;
    uint8_t code = 1;
    for (size_t i = 0; i < n; i++) {
        if (in[i]) {
            out[o++] = in[i];
            if (++code < 0xFF) continue;
        }
        out[code_at] = code;   /* a zero ends the block; a full block (254 bytes) ends without one */
        code_at = o++;
        code = 1;
    }
    out[code_at] = code;
    return o;
}

/* Returns the decoded length, or (size_t)-1 on a malformed stream (a NUL, a block past the end). */
static size_t cobs_decode(const uint8_t* in, size_t n, uint8_t* out) {
    size_t i = 0, o = 0;
    while (i < n) {
        uint8_t code = in[i++];
        if (!code || (size_t)(code - 1) > n - i) return (size_t)-1;
        for (uint8_t k = 1; k < code; k++) {
            if (!in[i]) return (size_t)-1;
            out[o++] = in[i++];
        }
        if (code < 0xFF && i < n) out[o++] = 0;
    }
    return o;
}

/* ---- the payload codec ---- */

typedef struct {
    uint8_t* raw;
    char* text;                                      /* NUL-terminated copies */
    size_t text_used, text_cap;
    const char** names;                              /* the parts' input/output name arrays */
    size_t names_used, names_cap;
    plus_pack_src packs[PLUS_CTX_MAX_PARTS][PLUS_MAX_ARCHS];
    char archs[PLUS_CTX_MAX_PARTS][PLUS_MAX_ARCHS][PLUS_NAME_LEN];
    int64_t* dims;                                   /* the constants' dims */
    size_t dims_used, dims_cap;
    const char* str_names[PLUS_CTX_MAX_PARTS][PLUS_CTX_MAX_STRS];
    const char* str_values[PLUS_CTX_MAX_PARTS][PLUS_CTX_MAX_STRS];
    size_t str_lens[PLUS_CTX_MAX_PARTS][PLUS_CTX_MAX_STRS];
} ctx_storage;

static size_t list_bytes(const char* const* v, size_t n) {
    size_t b = n ? n - 1 : 0;
    for (size_t i = 0; i < n; i++) b += strlen(v[i]);
    return b;
}

static uint8_t* put_len(uint8_t* p, char tag, uint64_t n) {
    *p++ = (uint8_t)tag;
    for (int k = 0; k < 8; k++) *p++ = (uint8_t)(n >> (8 * k));
    return p;
}

static uint8_t* put_record(uint8_t* p, char tag, const void* data, size_t n) {
    p = put_len(p, tag, n);
    if (n) memcpy(p, data, n);
    return p + n;
}

static uint8_t* put_list(uint8_t* p, char tag, const char* const* v, size_t n) {
    p = put_len(p, tag, list_bytes(v, n));
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(v[i]);
        memcpy(p, v[i], l);
        p += l;
        if (i + 1 < n) *p++ = '\n';
    }
    return p;
}

int plus_ctx_encode(const plus_ctx_part* parts, size_t n, const plus_ctx_const* consts, size_t n_consts, uint8_t** out,
                    size_t* len) {
    *out = NULL;
    *len = 0;
    if (!n || n > PLUS_CTX_MAX_PARTS || n_consts > PLUS_CTX_MAX_CONSTS) return -1;
    size_t total = strlen(PLUS_CTX_MAGIC) + 9;   /* magic, end record */
    for (size_t i = 0; i < n; i++) {
        const plus_ctx_part* q = &parts[i];
        total += 5 * 9 + strlen(q->node) + list_bytes(q->inputs, q->n_inputs) + list_bytes(q->outputs, q->n_outputs);
        if (q->kind == PLUS_PART_HOST) {
            total += q->model_size;
            continue;
        }
        total += strlen(q->plan) + (q->signature ? 9 + strlen(q->signature) : 0);
        for (int k = 0; k < q->n_packs; k++) total += 9 + 2 + strlen(q->packs[k].arch) + q->packs[k].size;
        total += 2 * 9 + (q->op_type ? strlen(q->op_type) : 0) + list_bytes(q->attr_names, q->n_attr_names);
        for (size_t k = 0; k < q->n_strs; k++) total += 9 + 2 + strlen(q->str_names[k]) + q->str_lens[k];
    }
    for (size_t c = 0; c < n_consts; c++) {
        if (consts[c].rank < 0 || consts[c].rank > PLUS_MAX_RANK) return -1;
        total += 9 + 2 + strlen(consts[c].name) + 4 + 1 + 8 * (size_t)consts[c].rank + consts[c].bytes;
    }
    uint8_t* buf = malloc(total);
    if (!buf) return -1;
    uint8_t* p = buf;
    memcpy(p, PLUS_CTX_MAGIC, strlen(PLUS_CTX_MAGIC));
    p += strlen(PLUS_CTX_MAGIC);
    for (size_t c = 0; c < n_consts; c++) {
        const plus_ctx_const* k = &consts[c];
        size_t nl = strlen(k->name);
        p = put_len(p, 'C', 2 + nl + 4 + 1 + 8 * (uint64_t)k->rank + k->bytes);
        *p++ = (uint8_t)(nl & 0xFF);
        *p++ = (uint8_t)(nl >> 8);
        memcpy(p, k->name, nl);
        p += nl;
        for (int b = 0; b < 4; b++) *p++ = (uint8_t)((uint32_t)k->dtype >> (8 * b));
        *p++ = (uint8_t)k->rank;
        for (int d = 0; d < k->rank; d++)
            for (int b = 0; b < 8; b++) *p++ = (uint8_t)((uint64_t)k->dims[d] >> (8 * b));
        if (k->bytes) memcpy(p, k->data, k->bytes);
        p += k->bytes;
    }
    for (size_t i = 0; i < n; i++) {
        const plus_ctx_part* q = &parts[i];
        p = put_record(p, q->kind == PLUS_PART_HOST ? 'H' : 'P', q->node, strlen(q->node));
        if (q->kind == PLUS_PART_HOST) p = put_record(p, 'M', q->model, q->model_size);
        else p = put_record(p, 'L', q->plan, strlen(q->plan));
        p = put_list(p, 'I', q->inputs, q->n_inputs);
        p = put_list(p, 'O', q->outputs, q->n_outputs);
        for (int k = 0; q->kind == PLUS_PART_KERNEL && k < q->n_packs; k++) {
            size_t al = strlen(q->packs[k].arch);
            p = put_len(p, 'A', 2 + al + q->packs[k].size);
            *p++ = (uint8_t)(al & 0xFF);
            *p++ = (uint8_t)(al >> 8);
            memcpy(p, q->packs[k].arch, al);
            p += al;
            if (q->packs[k].size) memcpy(p, q->packs[k].data, q->packs[k].size);
            p += q->packs[k].size;
        }
        if (q->kind == PLUS_PART_KERNEL && q->signature) p = put_record(p, 'S', q->signature, strlen(q->signature));
        if (q->kind != PLUS_PART_KERNEL) continue;
        if (q->op_type) p = put_record(p, 'T', q->op_type, strlen(q->op_type));
        if (q->n_attr_names) p = put_list(p, 'N', q->attr_names, q->n_attr_names);
        for (size_t k = 0; k < q->n_strs; k++) {
            size_t nl = strlen(q->str_names[k]);
            p = put_len(p, 'V', 2 + nl + q->str_lens[k]);
            *p++ = (uint8_t)(nl & 0xFF);
            *p++ = (uint8_t)(nl >> 8);
            memcpy(p, q->str_names[k], nl);
            p += nl;
            if (q->str_lens[k]) memcpy(p, q->str_values[k], q->str_lens[k]);
            p += q->str_lens[k];
        }
    }
    p = put_record(p, 'E', NULL, 0);
    *out = buf;
    *len = (size_t)(p - buf);
    return 0;
}

static char* keep_text(ctx_storage* s, const uint8_t* data, size_t n) {
    if (memchr(data, 0, n) || s->text_used + n + 1 > s->text_cap) return NULL;
    char* t = s->text + s->text_used;
    memcpy(t, data, n);
    t[n] = 0;
    s->text_used += n + 1;
    return t;
}

static int keep_list(ctx_storage* s, const uint8_t* data, size_t n, const char* const** v, size_t* count) {
    char* t = keep_text(s, data, n);
    if (!t) return -1;
    size_t c = n ? 1 : 0;
    for (size_t i = 0; i < n; i++) c += t[i] == '\n';
    if (s->names_used + c > s->names_cap) return -1;
    const char** out = s->names + s->names_used;
    for (size_t i = 0; i < c; i++) {
        out[i] = t;
        t += strcspn(t, "\n");
        if (*t) *t++ = 0;
    }
    s->names_used += c;
    *v = out;
    *count = c;
    return 0;
}

static void storage_free(ctx_storage* s) {
    if (!s) return;
    free(s->raw);
    free(s->text);
    free(s->names);
    free(s->dims);
    free(s);
}

void plus_ctx_payload_free(plus_ctx_payload* p) {
    if (!p) return;
    storage_free(p->storage);
    free(p->consts);
    memset(p, 0, sizeof *p);
}

#define BAD(...) (snprintf(err, errlen, __VA_ARGS__), plus_ctx_payload_free(out), -1)

/* ---- the Fused node a kernel part was, owned ---- */

void plus_ctx_fused_free(plus_ctx_fused* f) {
    if (!f) return;
    free(f->op_type);
    for (size_t i = 0; f->attr_names && i < f->n_attr_names; i++) free(f->attr_names[i]);
    free(f->attr_names);
    for (size_t i = 0; i < f->n_strs; i++) free(f->str_names[i]), free(f->str_values[i]);
    memset(f, 0, sizeof *f);
}

int plus_ctx_fused_add_string(plus_ctx_fused* f, const char* name, const uint8_t* value, size_t len) {
    if (f->n_strs == PLUS_CTX_MAX_STRS || !name) return -1;
    char* n = strdup(name);
    char* v = malloc(len ? len : 1);
    if (!n || !v) return free(n), free(v), -1;
    if (len) memcpy(v, value, len);
    f->str_names[f->n_strs] = n, f->str_values[f->n_strs] = v, f->str_lens[f->n_strs++] = len;
    return 0;
}

int plus_ctx_fused_set(plus_ctx_fused* f, const plus_ctx_part* src) {
    plus_ctx_fused_free(f);
    int bad = src->op_type && !(f->op_type = strdup(src->op_type));
    if (!bad && !(f->attr_names = calloc(src->n_attr_names ? src->n_attr_names : 1, sizeof *f->attr_names))) bad = 1;
    if (!bad) f->n_attr_names = src->n_attr_names;
    for (size_t i = 0; !bad && i < src->n_attr_names; i++) bad = !(f->attr_names[i] = strdup(src->attr_names[i]));
    for (size_t i = 0; !bad && i < src->n_strs; i++)
        bad = plus_ctx_fused_add_string(f, src->str_names[i], (const uint8_t*)src->str_values[i], src->str_lens[i]);
    if (bad) plus_ctx_fused_free(f);
    return bad ? -1 : 0;
}

void plus_ctx_fused_view(const plus_ctx_fused* f, plus_ctx_part* q) {
    q->op_type = f->op_type;
    q->attr_names = (const char* const*)f->attr_names;
    q->n_attr_names = f->n_attr_names;
    q->str_names = (const char* const*)f->str_names;
    q->str_values = (const char* const*)f->str_values;
    q->str_lens = f->str_lens;
    q->n_strs = f->n_strs;
}

static const char* part_missing(const plus_ctx_part* q, int have_body, int have_in, int have_out) {
    if (!have_body) return q->kind == PLUS_PART_HOST ? "its model" : "its plan";
    if (!have_in || !have_out) return "its input or output names";
    if (q->kind == PLUS_PART_KERNEL && !q->n_packs) return "an image pack";
    return NULL;
}

int plus_ctx_decode(const uint8_t* data, size_t len, plus_ctx_payload* out, char* err, size_t errlen) {
    memset(out, 0, sizeof *out);
    ctx_storage* s = calloc(1, sizeof *s);
    if (!s) return snprintf(err, errlen, "out of memory"), -1;
    out->storage = s;
    size_t em = strlen(PLUS_CTX_EMBED_MAGIC), rm = strlen(PLUS_CTX_MAGIC), n = len;
    if (!(s->raw = malloc(len ? len : 1))) return BAD("out of memory");
    if (len >= em && !memcmp(data, PLUS_CTX_EMBED_MAGIC, em)) {
        n = cobs_decode(data + em, len - em, s->raw);
        if (n == (size_t)-1) return BAD("the embedded payload is not valid COBS");
    } else {
        memcpy(s->raw, data, len);
    }
    if (n < rm || memcmp(s->raw, PLUS_CTX_MAGIC, rm))
        return BAD("not a PlusEP context payload (no \"PLUSEPCTX1\" header)");
    s->text_cap = n + 1;
    s->names_cap = n + 2 * PLUS_CTX_MAX_PARTS;
    s->dims_cap = n / 8 + 1;
    if (!(s->text = malloc(s->text_cap)) || !(s->names = calloc(s->names_cap, sizeof *s->names)) ||
        !(s->dims = calloc(s->dims_cap, sizeof *s->dims)))
        return BAD("out of memory");
    const uint8_t* p = s->raw + rm;
    const uint8_t* end = s->raw + n;
    plus_ctx_part* q = NULL;
    int have_body = 0, have_in = 0, have_out = 0, ended = 0;
    size_t cap_consts = 0;
    const char* missing;
    while (p < end && !ended) {
        if ((size_t)(end - p) < 9) return BAD("a record header is cut off");
        char tag = (char)p[0];
        uint64_t rl = 0;
        for (int k = 0; k < 8; k++) rl |= (uint64_t)p[1 + k] << (8 * k);
        p += 9;
        if (rl > (uint64_t)(end - p)) return BAD("record '%c' says %llu bytes, %zu are left", tag,
                                                 (unsigned long long)rl, (size_t)(end - p));
        size_t l = (size_t)rl;
        int part_record = tag == 'L' || tag == 'I' || tag == 'O' || tag == 'A' || tag == 'S' || tag == 'M' ||
                          tag == 'T' || tag == 'N' || tag == 'V';
        if (part_record && !q) return BAD("record '%c' before the first part", tag);
        if (((tag == 'L' || tag == 'A' || tag == 'S' || tag == 'T' || tag == 'N' || tag == 'V') &&
             q->kind != PLUS_PART_KERNEL) ||
            (tag == 'M' && q->kind != PLUS_PART_HOST))
            return BAD("part '%s': record '%c' does not belong to its kind", q->node, tag);
        switch (tag) {
        case 'P':
        case 'H':
            if (q && (missing = part_missing(q, have_body, have_in, have_out)))
                return BAD("part '%s' lacks %s", q->node, missing);
            if (out->n == PLUS_CTX_MAX_PARTS) return BAD("more than %d parts", PLUS_CTX_MAX_PARTS);
            q = &out->parts[out->n++];
            q->kind = tag == 'H' ? PLUS_PART_HOST : PLUS_PART_KERNEL;
            q->packs = s->packs[out->n - 1];
            have_body = have_in = have_out = 0;
            if (!l || l >= PLUS_NAME_LEN || !(q->node = keep_text(s, p, l))) return BAD("a part's node name is bad");
            break;
        case 'L':
            if (have_body++ || !(q->plan = keep_text(s, p, l))) return BAD("part '%s': a second or bad plan", q->node);
            break;
        case 'M':
            if (have_body++ || !l) return BAD("part '%s': a second or empty model", q->node);
            q->model = p;
            q->model_size = l;
            break;
        case 'I':
        case 'O':
            if (tag == 'I' ? have_in++ : have_out++) return BAD("part '%s': a second '%c' record", q->node, tag);
            if (keep_list(s, p, l, tag == 'I' ? &q->inputs : &q->outputs, tag == 'I' ? &q->n_inputs : &q->n_outputs))
                return BAD("part '%s': bad names", q->node);
            break;
        case 'A': {
            if (q->n_packs == PLUS_MAX_ARCHS) return BAD("part '%s': more than %d packs", q->node, PLUS_MAX_ARCHS);
            size_t al = l >= 2 ? (size_t)p[0] | (size_t)p[1] << 8 : 0;
            if (l < 2 || !al || al >= PLUS_NAME_LEN || al > l - 2 || memchr(p + 2, 0, al))
                return BAD("part '%s': a pack with a bad arch name", q->node);
            char* arch = s->archs[out->n - 1][q->n_packs];
            memcpy(arch, p + 2, al);
            arch[al] = 0;
            for (int k = 0; k < q->n_packs; k++)
                if (!strcmp(q->packs[k].arch, arch)) return BAD("part '%s': two packs for %s", q->node, arch);
            s->packs[out->n - 1][q->n_packs++] = (plus_pack_src){.arch = arch, .data = p + 2 + al, .size = l - 2 - al};
            break;
        }
        case 'S':
            if (q->signature || !(q->signature = keep_text(s, p, l))) return BAD("part '%s': a bad signature", q->node);
            break;
        case 'T':
            if (q->op_type || !l || l >= PLUS_NAME_LEN || !(q->op_type = keep_text(s, p, l)))
                return BAD("part '%s': a second or bad op type", q->node);
            break;
        case 'N':
            if (q->n_attr_names || keep_list(s, p, l, &q->attr_names, &q->n_attr_names))
                return BAD("part '%s': a second or bad attribute list", q->node);
            break;
        case 'V': {
            size_t nl = l >= 2 ? (size_t)p[0] | (size_t)p[1] << 8 : 0;
            if (l < 2 || !nl || nl > l - 2 || q->n_strs == PLUS_CTX_MAX_STRS) return BAD("part '%s': a bad attribute", q->node);
            size_t k = q->n_strs;
            const char* nm = keep_text(s, p + 2, nl);
            if (!nm || !strcmp(nm, "plus_plan")) return BAD("part '%s': a bad attribute name", q->node);
            s->str_names[out->n - 1][k] = nm;
            s->str_values[out->n - 1][k] = (const char*)(p + 2 + nl);   /* binary: its length beside it */
            s->str_lens[out->n - 1][k] = l - 2 - nl;
            q->str_names = s->str_names[out->n - 1];
            q->str_values = s->str_values[out->n - 1];
            q->str_lens = s->str_lens[out->n - 1];
            q->n_strs = k + 1;
            break;
        }
        case 'C': {
            size_t nl = l >= 2 ? (size_t)p[0] | (size_t)p[1] << 8 : 0;
            if (l < 2 || !nl || nl > l - 2 || l - 2 - nl < 5) return BAD("a constant record is cut off");
            const uint8_t* c = p + 2 + nl;
            uint32_t dtype = (uint32_t)c[0] | (uint32_t)c[1] << 8 | (uint32_t)c[2] << 16 | (uint32_t)c[3] << 24;
            int rank = c[4];
            if (rank > PLUS_MAX_RANK || l - 2 - nl - 5 < 8 * (size_t)rank)
                return BAD("a constant of rank %d (at most %d) or cut off", rank, PLUS_MAX_RANK);
            if (out->n_consts == PLUS_CTX_MAX_CONSTS) return BAD("more than %d constants", PLUS_CTX_MAX_CONSTS);
            if (out->n_consts == cap_consts) {
                cap_consts = cap_consts ? 2 * cap_consts : 16;
                plus_ctx_const* grown = realloc(out->consts, cap_consts * sizeof *grown);
                if (!grown) return BAD("out of memory");
                out->consts = grown;
            }
            if (s->dims_used + (size_t)rank > s->dims_cap) return BAD("too many constant dims");
            int64_t* dims = s->dims + s->dims_used;
            s->dims_used += (size_t)rank;
            long long elems = 1;
            for (int d = 0; d < rank; d++) {
                uint64_t v = 0;
                for (int b = 0; b < 8; b++) v |= (uint64_t)c[5 + 8 * d + b] << (8 * b);
                dims[d] = (int64_t)v;
                if (dims[d] < 0 || __builtin_mul_overflow(elems, (long long)dims[d], &elems)) elems = -1;
            }
            size_t bytes = l - 2 - nl - 5 - 8 * (size_t)rank;
            long long want = elems < 0 ? -1 : plus_tensor_bytes((int)dtype, elems);
            plus_ctx_const* k = &out->consts[out->n_consts];
            if (!(k->name = keep_text(s, p + 2, nl))) return BAD("a constant's name is bad");
            if (want < 0 || (size_t)want != bytes)
                return BAD("constant '%s' holds %zu bytes, its type and shape say %lld", k->name, bytes, want);
            k->dtype = (int)dtype;
            k->rank = rank;
            k->dims = dims;
            k->data = c + 5 + 8 * (size_t)rank;
            k->bytes = bytes;
            out->n_consts++;
            break;
        }
        case 'E':
            if (l) return BAD("the end record has content");
            ended = 1;
            break;
        default:
            return BAD("unknown record '%c' (0x%02x)", tag >= 0x20 && tag < 0x7f ? tag : '?', (unsigned char)tag);
        }
        p += l;
    }
    if (!ended) return BAD("the payload is cut off (no end record)");
    if (p != end) return BAD("%zu bytes after the end record", (size_t)(end - p));
    if (!q) return BAD("no part");
    if ((missing = part_missing(q, have_body, have_in, have_out))) return BAD("part '%s' lacks %s", q->node, missing);
    return 0;
}
#undef BAD

/* ---- attributes and paths ---- */

static const OrtOpAttr* attr_of(const OrtNode* n, const char* name) {
    const OrtOpAttr* a = NULL;
    OrtStatus* st = ORT_CALL(plus_ep_api, Node_GetAttributeByName)(n, name, &a);
    if (st) return plus_ep_drop(st), NULL;
    return a;
}

/* A STRING attribute (malloc'ed, NUL-terminated), NULL when absent. Every STRING PlusEP reads here is
 * NUL-free (the embedded payload is COBS), so its length is strlen's: ORT versions differ on whether the
 * size ReadOpAttr reports counts the NUL it appends. */
static uint8_t* attr_bytes(const OrtNode* n, const char* name, size_t* len) {
    const OrtOpAttr* a = attr_of(n, name);
    *len = 0;
    if (!a) return NULL;
    size_t size = 0;
    plus_ep_drop(ORT_CALL(plus_ep_api, ReadOpAttr)(a, ORT_OP_ATTR_STRING, NULL, 0, &size));   /* size query */
    uint8_t* s = calloc(size + 2, 1);
    if (!s) return NULL;
    size_t got = 0;
    OrtStatus* st = ORT_CALL(plus_ep_api, ReadOpAttr)(a, ORT_OP_ATTR_STRING, s, size + 1, &got);
    if (st) return plus_ep_drop(st), free(s), NULL;
    *len = strlen((const char*)s);
    return s;
}

static int attr_int(const OrtNode* n, const char* name, int64_t fallback) {
    const OrtOpAttr* a = attr_of(n, name);
    int64_t v = fallback;
    size_t size = 0;
    if (a) {
        OrtStatus* st = ORT_CALL(plus_ep_api, ReadOpAttr)(a, ORT_OP_ATTR_INT, &v, sizeof v, &size);
        if (st) plus_ep_drop(st), v = fallback;
    }
    return (int)v;
}

int plus_ctx_is_node(const OrtNode* n) {
    const char* s = NULL;
    OrtStatus* st = ORT_CALL(plus_ep_api, Node_GetDomain)(n, &s);
    if (st || !s || strcmp(s, CTX_DOMAIN)) return plus_ep_drop(st), 0;
    if ((st = ORT_CALL(plus_ep_api, Node_GetOperatorType)(n, &s)) || !s || strcmp(s, CTX_OP)) return plus_ep_drop(st), 0;
    size_t len = 0;
    uint8_t* src = attr_bytes(n, "source", &len);
    int ours = src && !strcmp((const char*)src, PLUS_EP_NAME);
    free(src);
    return ours;
}

static const char* node_name(const OrtNode* n) {
    const char* s = NULL;
    OrtStatus* st = ORT_CALL(plus_ep_api, Node_GetName)(n, &s);
    if (st) plus_ep_drop(st), s = NULL;
    return s ? s : "";
}

/* The folder of `path` (with its trailing '/'), "" for a bare file name. */
static void folder_of(const char* path, char* buf, size_t n) {
    const char* slash = strrchr(path, '/');
    size_t len = slash ? (size_t)(slash - path) + 1 : 0;
    if (len >= n) len = n - 1;
    memcpy(buf, path, len);
    buf[len] = 0;
}

/* A side-file reference the model may carry: relative, no ".." component, no backslash, printable. */
static int safe_relative(const char* ref) {
    if (!*ref || ref[0] == '/' || strchr(ref, '\\')) return 0;
    for (const char* p = ref; *p; p++)
        if ((unsigned char)*p < 0x20) return 0;
    for (const char* p = ref; *p;) {
        size_t k = strcspn(p, "/");
        if ((k == 2 && !strncmp(p, "..", 2)) || k == 0) return 0;
        p += k + (p[k] == '/');
    }
    return 1;
}

static uint8_t* read_file(const char* path, size_t* len, char* why, size_t wn) {
    FILE* f = fopen(path, "rb");
    uint8_t* buf = NULL;
    *len = 0;
    if (!f) return snprintf(why, wn, "%s", strerror(errno)), NULL;
    if (!fseek(f, 0, SEEK_END)) {
        long size = ftell(f);
        if (size >= 0 && !fseek(f, 0, SEEK_SET) && (buf = malloc((size_t)size + 1)) &&
            fread(buf, 1, (size_t)size, f) == (size_t)size)
            *len = (size_t)size;
        else
            free(buf), buf = NULL, snprintf(why, wn, "cannot read it");
    }
    fclose(f);
    return buf;
}

OrtStatus* plus_ctx_load(const OrtGraph* graph, const OrtNode* n, plus_ctx_payload* out) {
    memset(out, 0, sizeof *out);
    const char* name = node_name(n);
    char err[PLUS_ERR_LEN];
    if (attr_int(n, "main_context", 1) != 1)
        return plus_ep_status(ORT_FAIL, "PlusEP EPContext node '%s': main_context=0 is not a PlusEP node (PlusEP "
                              "writes every node with main_context=1)", name);
    int embed = attr_int(n, "embed_mode", 1);
    size_t len = 0;
    uint8_t* value = attr_bytes(n, "ep_cache_context", &len);
    if (!value)
        return plus_ep_status(ORT_FAIL, "PlusEP EPContext node '%s': no ep_cache_context attribute; compile the model "
                              "again (onnxruntime.ModelCompiler, or `plus-ep rewrite MODEL -o OUT --epcontext embed`)",
                              name);
    uint8_t* data = value;
    if (!embed) {
        const char* model = NULL;
        plus_ep_drop(ORT_CALL(plus_ep_api, Graph_GetModelPath)(graph, &model));
        const char* ref = (const char*)value;
        if (!safe_relative(ref)) {
            OrtStatus* st = plus_ep_status(ORT_FAIL, "PlusEP EPContext node '%s': its context file '%.200s' is not a "
                                           "relative path inside the model's folder (refused)", name, ref);
            free(value);
            return st;
        }
        if (!model || !*model) {
            OrtStatus* st = plus_ep_status(ORT_FAIL, "PlusEP EPContext node '%s' keeps its kernels in the file '%s' "
                                           "beside the model, but the model was loaded from bytes: load it from its "
                                           "path, or compile it with the context embedded (ep.context_embed_mode=1)",
                                           name, ref);
            free(value);
            return st;
        }
        char path[PATH_MAX], dir[PATH_MAX], why[256] = "";
        folder_of(model, dir, sizeof dir);
        int w = snprintf(path, sizeof path, "%s%s", dir, ref);
        data = w < 0 || (size_t)w >= sizeof path ? (snprintf(why, sizeof why, "the path is too long"), NULL)
                                                 : read_file(path, &len, why, sizeof why);
        free(value);
        if (!data)
            return plus_ep_status(ORT_FAIL, "PlusEP EPContext node '%s': cannot read its context file %s (%s); it must "
                                  "stay beside the model", name, path, why);
    }
    int rc = plus_ctx_decode(data, len, out, err, sizeof err);
    free(data);
    if (rc)
        return plus_ep_status(ORT_FAIL, "PlusEP EPContext node '%s': its payload is damaged or not PlusEP's (%s); "
                              "compile the model again", name, err);
    return NULL;
}

/* ---- writing ---- */

/* The EPContext model being written: ep.context_file_path, else <input model>_ctx.onnx (ORT's rule). */
static void ctx_model_path(const plus_ctx_config* cfg, const OrtGraph* graph, char* buf, size_t n) {
    buf[0] = 0;
    if (cfg->file_path[0]) {
        snprintf(buf, n, "%s", cfg->file_path);
        return;
    }
    const char* model = NULL;
    plus_ep_drop(ORT_CALL(plus_ep_api, Graph_GetModelPath)(graph, &model));
    if (!model || !*model) return;
    const char* dot = strrchr(model, '.');
    const char* slash = strrchr(model, '/');
    int stem = dot && (!slash || dot > slash) ? (int)(dot - model) : (int)strlen(model);
    snprintf(buf, n, "%.*s_ctx.onnx", stem, model);
}

static OrtStatus* write_side_file(const plus_ctx_config* cfg, const OrtGraph* graph, const char* fused_name,
                                  const uint8_t* data, size_t len, char* ref, size_t rn) {
    char model[PATH_MAX], dir[PATH_MAX], path[PATH_MAX + 256];
    ctx_model_path(cfg, graph, model, sizeof model);
    if (!model[0])
        return plus_ep_status(ORT_FAIL, "PlusEP: an EPContext model with its kernels in side files needs a path: set "
                              "ep.context_file_path, load the model from a file, or embed the kernels "
                              "(ep.context_embed_mode=1; ModelCompiler(..., embed_compiled_data_into_model=True))");
    folder_of(model, dir, sizeof dir);
    const char* base = model + strlen(dir);
    const char* dot = strrchr(base, '.');
    int stem = dot ? (int)(dot - base) : (int)strlen(base);
    char clean[PLUS_NAME_LEN];
    size_t k = 0;
    for (const char* p = fused_name; *p && k + 1 < sizeof clean; p++)
        clean[k++] = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
                     *p == '.' ? *p : '_';
    clean[k] = 0;
    int w = snprintf(ref, rn, "%.*s_%s.plusep", stem, base, clean);
    int w2 = w < 0 || (size_t)w >= rn ? -1 : snprintf(path, sizeof path, "%s%s", dir, ref);
    if (w2 < 0 || (size_t)w2 >= sizeof path)
        return plus_ep_status(ORT_FAIL, "PlusEP: the EPContext side file's path for %s is too long", model);
    FILE* f = fopen(path, "wb");
    int ok = f && fwrite(data, 1, len, f) == len;
    if (f && fclose(f)) ok = 0;
    if (!ok)
        return plus_ep_status(ORT_FAIL, "PlusEP: cannot write the EPContext side file %s (%s)", path, strerror(errno));
    return NULL;
}

OrtStatus* plus_ctx_names(const OrtNode* ctx_node, const plus_ctx_part* part, const char*** in, const char*** out) {
    const char** node_in = NULL;
    const char** node_out = NULL;
    size_t n_node_in = 0, n_node_out = 0;
    *in = *out = NULL;
    OrtStatus* st = plus_ep_io_names(ctx_node, 0, &node_in, &n_node_in);
    if (!st) st = plus_ep_io_names(ctx_node, 1, &node_out, &n_node_out);
    const char** a = st ? NULL : calloc(part->n_inputs + 1, sizeof *a);
    const char** b = st ? NULL : calloc(part->n_outputs + 1, sizeof *b);
    if (!st && (!a || !b)) st = plus_ep_status(ORT_FAIL, "PlusEP: out of memory");
    for (int side = 0; side < 2 && !st; side++) {
        const char* const* refs = side ? part->outputs : part->inputs;
        size_t n = side ? part->n_outputs : part->n_inputs, have = side ? n_node_out : n_node_in;
        const char** names = side ? node_out : node_in;
        const char** dst = side ? b : a;
        for (size_t i = 0; i < n && !st; i++) {
            char* end = NULL;
            if (refs[i][0] != '#') {   /* "" or a tensor inside the node */
                dst[i] = refs[i];
                continue;
            }
            long k = strtol(refs[i] + 1, &end, 10);
            if (k < 0 || !end || *end || end == refs[i] + 1 || (size_t)k >= have)
                st = plus_ep_status(ORT_FAIL, "PlusEP EPContext node '%s': part '%s' refers to %s '%s' of the node, "
                                    "which has %zu; compile the model again", node_name(ctx_node), part->node,
                                    side ? "output" : "input", refs[i], have);
            else dst[i] = names[k];
        }
    }
    free(node_in);
    free(node_out);
    if (st) return free(a), free(b), st;
    *in = a;
    *out = b;
    return NULL;
}

OrtStatus* plus_ctx_make_node(const plus_ctx_config* cfg, const OrtGraph* graph, const OrtNode* fused,
                              const plus_ctx_part* parts, size_t n_parts, const plus_ctx_const* consts,
                              size_t n_consts, OrtNode** out) {
    *out = NULL;
    const char* fname = node_name(fused);
    uint8_t* raw = NULL;
    size_t raw_len = 0;
    if (plus_ctx_encode(parts, n_parts, consts, n_consts, &raw, &raw_len))
        return plus_ep_status(ORT_FAIL, "PlusEP: cannot encode the EPContext payload of '%s'", fname);
    OrtStatus* st = NULL;
    char* value = NULL;
    char ref[PATH_MAX];
    if (cfg->embed) {
        size_t em = strlen(PLUS_CTX_EMBED_MAGIC);
        value = malloc(em + cobs_bound(raw_len) + 1);
        if (value) {
            memcpy(value, PLUS_CTX_EMBED_MAGIC, em);
            size_t l = em + cobs_encode(raw, raw_len, (uint8_t*)value + em);
            value[l] = 0;
            if (l > INT_MAX) st = plus_ep_status(ORT_FAIL, "PlusEP: the EPContext payload of '%s' is over 2 GB; use "
                                                 "ep.context_embed_mode=0 (a side file)", fname);
        } else {
            st = plus_ep_status(ORT_FAIL, "PlusEP: out of memory");
        }
    } else {
        st = write_side_file(cfg, graph, fname, raw, raw_len, ref, sizeof ref);
    }
    free(raw);
    /* hardware_architecture: the archs of the packs, comma-separated */
    char archs[512] = "";
    for (size_t i = 0; i < n_parts; i++)
        for (int k = 0; k < parts[i].n_packs; k++) {
            const char* a = parts[i].packs[k].arch;
            int seen = 0;
            for (size_t j = 0; j < i && !seen; j++)
                for (int m = 0; m < parts[j].n_packs && !seen; m++) seen = !strcmp(parts[j].packs[m].arch, a);
            if (!seen) snprintf(archs + strlen(archs), sizeof archs - strlen(archs), "%s%s", archs[0] ? "," : "", a);
        }
    const char** ins = NULL;
    const char** outs = NULL;
    size_t n_ins = 0, n_outs = 0;
    OrtOpAttr* attrs[7] = {0};
    int64_t one = 1, embed = cfg->embed;
    char sdk[64];
    snprintf(sdk, sizeof sdk, "%s %s", PLUS_EP_NAME, PLUS_EP_VERSION);
    const char* ctx = cfg->embed ? value : ref;
    if (!st) st = plus_ep_io_names(fused, 0, &ins, &n_ins);
    if (!st) st = plus_ep_io_names(fused, 1, &outs, &n_outs);
    struct { const char* name; const void* data; int len; int type; } spec[7] = {
        {"main_context", &one, 1, ORT_OP_ATTR_INT},
        {"embed_mode", &embed, 1, ORT_OP_ATTR_INT},
        {"ep_cache_context", ctx, ctx ? (int)strlen(ctx) : 0, ORT_OP_ATTR_STRING},
        {"source", PLUS_EP_NAME, (int)strlen(PLUS_EP_NAME), ORT_OP_ATTR_STRING},
        {"ep_sdk_version", sdk, (int)strlen(sdk), ORT_OP_ATTR_STRING},
        {"partition_name", fname, (int)strlen(fname), ORT_OP_ATTR_STRING},
        {"hardware_architecture", archs, (int)strlen(archs), ORT_OP_ATTR_STRING},
    };
    for (int a = 0; a < 7 && !st; a++)
        st = ORT_CALL(plus_ep_api, CreateOpAttr)(spec[a].name, spec[a].data, spec[a].len, spec[a].type, &attrs[a]);
    if (!st) {
        const void* me = ORT_CALL(plus_ep_api, GetModelEditorApi)();
        if (!me) st = plus_ep_status(ORT_FAIL, "PlusEP: this ONNX Runtime has no model editor API (EPContext nodes)");
        else
            st = ((ME_CreateNode_fn)ORT_SLOT(me, ME_CreateNode_slot))(CTX_OP, CTX_DOMAIN, fname, ins, n_ins, outs, n_outs,
                                                                      attrs, 7, out);   /* copies the attributes */
    }
    for (int a = 0; a < 7; a++)
        if (attrs[a]) ORT_CALL(plus_ep_api, ReleaseOpAttr)(attrs[a]);
    free(ins);
    free(outs);
    free(value);
    return st;
}
