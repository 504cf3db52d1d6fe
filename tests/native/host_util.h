/* Shared by the C test programs in tests/native (harness.c, ortop_host.c): a check that exits with
 * status 2 naming the file and line, and reading a whole file. Tests only. */
#pragma once
#include <stdio.h>
#include <stdlib.h>

#define CHECK(c, ...) do { if (!(c)) { printf("CHECK FAILED %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); \
                                       printf("\n"); exit(2); } } while (0)

/* The whole file, NUL-terminated (its length in *n when n is not NULL); a CHECK failure if unreadable. */
static inline char* slurp(const char* path, size_t* n) {
    FILE* f = fopen(path, "rb");
    CHECK(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char* s = malloc((size_t)len + 1);
    CHECK(fread(s, 1, (size_t)len, f) == (size_t)len, "short read %s", path);
    s[len] = 0;
    fclose(f);
    if (n) *n = (size_t)len;
    return s;
}
