/* libFuzzer entry point `pack`: plus_pack_parse, plus_pack_image, plus_pack_ptx (pack.c) on arbitrary
 * bytes, and the arch choice (plus_pack_select, plus_pack_select_ptx) over packs whose arch names come
 * from the input. Input: a count byte, that many NUL-terminated arch names, then the pack bytes (in a
 * heap block of exactly their size). Every byte of every image and PTX text the pack reports is read. */
#include <stdio.h>

#include "pack.h"
#include "fuzz_util.h"

static const int CCS[][2] = {{7, 5}, {8, 0}, {8, 6}, {8, 9}, {9, 0}, {10, 0}, {12, 0}, {12, 1}};

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fz_in in = {data, size};
    int n = 1 + fz_u8(&in) % 4;
    plus_pack packs[4];
    memset(packs, 0, sizeof packs);
    for (int i = 0; i < n; i++) {
        char* a = fz_cstr(&in);
        snprintf(packs[i].arch, sizeof packs[i].arch, "%s", a);
        free(a);
    }
    size_t len;
    uint8_t* blob = fz_blob(&in, in.n, &len);
    char err[PLUS_ERR_LEN];
    int ok = !plus_pack_parse(blob, len, &packs[0], err, sizeof err);
    unsigned sum = 0;
    if (ok) {
        for (int i = 1; i < n; i++) {
            char arch[PLUS_NAME_LEN];
            memcpy(arch, packs[i].arch, sizeof arch);
            packs[i] = packs[0];
            memcpy(packs[i].arch, arch, sizeof arch);
        }
        for (uint32_t i = 0; i < packs[0].count; i++) {
            const uint8_t* img;
            size_t sz;
            plus_pack_image(&packs[0], i, &img, &sz);
            if (!sz) abort();
            for (size_t j = 0; j < sz; j++) sum += img[j];
            const char* ptx;
            if (!plus_pack_ptx(&packs[0], i, &ptx, &sz)) {
                if (!sz || ptx[sz - 1]) abort();   /* NUL-terminated within its size */
                for (size_t j = 0; j < sz; j++) sum += (unsigned char)ptx[j];
            }
        }
        for (size_t c = 0; c < sizeof CCS / sizeof CCS[0]; c++) {
            int k = plus_pack_select(packs, n, CCS[c][0], CCS[c][1], err, sizeof err);
            if (k >= n) abort();
            k = plus_pack_select_ptx(packs, n, CCS[c][0], CCS[c][1]);
            if (k >= n) abort();
        }
    } else if (!memchr(err, 0, sizeof err)) {
        abort();
    }
    free(blob);
    return (int)(sum & 0);
}
