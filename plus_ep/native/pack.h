/* Kernel image packs (kernels/CONTRACT.md §4): one per compiled arch, node attribute
 * plus_images_<arch>; parsing, image lookup and the choice of pack for a device. Pure C. */
#ifndef PLUS_PLAN_H_PACK
#define PLUS_PLAN_H_PACK

#include <stddef.h>
#include <stdint.h>

#include "plan.h"

typedef struct {
    char arch[PLUS_NAME_LEN];   /* "sm_90a" */
    const uint8_t* data;        /* owned by the caller */
    size_t size;
    uint32_t count;
    int version;                /* 1: cubins only ("PLUSIMG1"), 2: cubins + PTX ("PLUSIMG2") */
} plus_pack;
/* Validate a pack; fills count. */
int plus_pack_parse(const uint8_t* data, size_t size, plus_pack* pack, char* err, size_t errlen);
/* Image i of a validated pack. */
void plus_pack_image(const plus_pack* pack, uint32_t i, const uint8_t** data, size_t* size);
/* Pick the pack for compute capability major.minor: exact (for X.0 with an "a" variant, the "a"
 * pack first), else the same major with the highest lower minor. Returns the index or -1 with a
 * message naming the device arch and the archs present. */
int plus_pack_select(const plus_pack* packs, int n, int major, int minor, char* err, size_t errlen);
/* PTX text of image i (NUL-terminated, size counts the NUL); -1 (text NULL) when the pack has none. */
int plus_pack_ptx(const plus_pack* pack, uint32_t i, const char** text, size_t* size);
/* When no cubin fits: the pack whose PTX (every image's) a driver of compute capability major.minor
 * can JIT: the highest arch <= the device's without a suffix ("sm_90a" PTX runs only on 9.0 and is
 * never chosen here). -1 when none. */
int plus_pack_select_ptx(const plus_pack* packs, int n, int major, int minor);

#endif
