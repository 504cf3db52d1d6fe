/* Kernel image packs (CONTRACT.md §4; written by kernels/wire/pack.py). Format 2: "PLUSIMG2", uint32 LE
 * count, count x (uint64 LE cubin offset, cubin size, PTX offset, PTX size) from the start of the pack,
 * then the cubins and NUL-terminated PTX texts (PTX size 0 = none). Format 1: "PLUSIMG1", uint32 LE
 * count, count x (uint64 LE offset, uint64 LE size), cubins only. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pack.h"

#define PACK_MAGIC "PLUSIMG1"
#define PACK_MAGIC2 "PLUSIMG2"
#define PACK_MAX_IMAGES 4096

static uint64_t le64(const uint8_t* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* Table entry i: 2 (v1) or 4 (v2) uint64 fields. */
static uint64_t field(const uint8_t* data, int version, uint32_t i, int f) {
    size_t entry = version == 2 ? 32 : 16;
    return le64(data + 12 + entry * (size_t)i + 8 * (size_t)f);
}

int plus_pack_parse(const uint8_t* data, size_t size, plus_pack* pack, char* err, size_t errlen) {
    int version = size >= 12 && !memcmp(data, PACK_MAGIC2, 8) ? 2 : size >= 12 && !memcmp(data, PACK_MAGIC, 8) ? 1 : 0;
    if (!version) {
        snprintf(err, errlen, "image pack for %s does not start with " PACK_MAGIC " or " PACK_MAGIC2, pack->arch);
        return -1;
    }
    size_t entry = version == 2 ? 32 : 16;
    uint32_t count = (uint32_t)data[8] | (uint32_t)data[9] << 8 | (uint32_t)data[10] << 16 | (uint32_t)data[11] << 24;
    if (count > PACK_MAX_IMAGES || 12 + (size_t)count * entry > size) {
        snprintf(err, errlen, "image pack for %s: table of %u entries does not fit in %zu bytes", pack->arch, count,
                 size);
        return -1;
    }
    uint64_t table_end = 12 + (uint64_t)count * entry;
    for (uint32_t i = 0; i < count; i++) {
        uint64_t off = field(data, version, i, 0), n = field(data, version, i, 1);
        if (off < table_end || off > size || n > size - off || n == 0) {
            snprintf(err, errlen, "image pack for %s: image %u (offset %llu, %llu bytes) lies outside the %zu-byte pack",
                     pack->arch, i, (unsigned long long)off, (unsigned long long)n, size);
            return -1;
        }
        if (version == 2 && (n = field(data, version, i, 3))) {
            off = field(data, version, i, 2);
            if (off < table_end || off > size || n > size - off || data[off + n - 1]) {
                snprintf(err, errlen, "image pack for %s: the PTX of image %u (offset %llu, %llu bytes) lies outside "
                         "the %zu-byte pack or is not NUL-terminated", pack->arch, i, (unsigned long long)off,
                         (unsigned long long)n, size);
                return -1;
            }
        }
    }
    pack->data = data;
    pack->size = size;
    pack->count = count;
    pack->version = version;
    return 0;
}

void plus_pack_image(const plus_pack* pack, uint32_t i, const uint8_t** data, size_t* size) {
    *data = pack->data + field(pack->data, pack->version, i, 0);
    *size = (size_t)field(pack->data, pack->version, i, 1);
}

int plus_pack_ptx(const plus_pack* pack, uint32_t i, const char** text, size_t* size) {
    if (pack->version != 2 || !field(pack->data, 2, i, 3)) return *text = NULL, *size = 0, -1;
    *text = (const char*)pack->data + field(pack->data, 2, i, 2);
    *size = (size_t)field(pack->data, 2, i, 3);
    return 0;
}

/* "sm_90a" -> major 9, minor 0, suffix 'a'. Returns -1 when not of that form. */
static int arch_parse(const char* a, int* major, int* minor, char* suffix) {
    if (strncmp(a, "sm_", 3)) return -1;
    const char* p = a + 3;
    size_t digits = strspn(p, "0123456789");
    if (digits < 2 || digits > 3) return -1;
    int v = atoi(p);   /* bounded by 3 digits */
    *major = v / 10;
    *minor = v % 10;
    *suffix = p[digits];
    if (*suffix && p[digits + 1]) return -1;
    return 0;
}

int plus_pack_select(const plus_pack* packs, int n, int major, int minor, char* err, size_t errlen) {
    int exact = -1, exact_a = -1, lower = -1, lower_minor = -1;
    for (int i = 0; i < n; i++) {
        int M, m;
        char sfx;
        if (arch_parse(packs[i].arch, &M, &m, &sfx) || M != major) continue;
        if (m == minor && sfx == 'a') exact_a = i;
        else if (m == minor && sfx == 0) exact = i;
        else if (m < minor && sfx == 0 && m > lower_minor) lower = i, lower_minor = m;
        /* "a" (arch-specific) images run only on exactly their arch; other suffixes are not chosen. */
    }
    if (exact_a >= 0) return exact_a;
    if (exact >= 0) return exact;
    if (lower >= 0) return lower;
    int len = snprintf(err, errlen, "no kernel image for the device's arch sm_%d%d (images present:", major, minor);
    for (int i = 0; i < n && len >= 0 && (size_t)len < errlen; i++)
        len += snprintf(err + len, errlen - (size_t)len, " %s", packs[i].arch);
    if (len >= 0 && (size_t)len < errlen)
        snprintf(err + len, errlen - (size_t)len, "%s); rebuild the model with `plus-ep rewrite IN -o OUT --arch sm_%d%d`",
                 n ? "" : " none", major, minor);
    return -1;
}

int plus_pack_select_ptx(const plus_pack* packs, int n, int major, int minor) {
    int best = -1, best_cc = -1;
    for (int i = 0; i < n; i++) {
        int M, m;
        char sfx;
        /* "a" PTX runs only on exactly its arch (never JIT it elsewhere); other suffixes are not chosen */
        if (arch_parse(packs[i].arch, &M, &m, &sfx) || sfx || M * 10 + m > major * 10 + minor) continue;
        int all = packs[i].count > 0;
        for (uint32_t j = 0; j < packs[i].count && all; j++) {
            const char* t;
            size_t sz;
            all = !plus_pack_ptx(&packs[i], j, &t, &sz);
        }
        if (all && M * 10 + m > best_cc) best = i, best_cc = M * 10 + m;
    }
    return best;
}
