/* SHA-256 (FIPS 180-4), streaming: the digest the trust check (trust.c) computes over a fused node's
 * plan and image packs, the same as Python's hashlib.sha256 (plus_ep/trust.py). */
#ifndef PLUS_SHA256_H
#define PLUS_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t h[8];
    uint64_t bytes;          /* message length so far */
    uint8_t block[64];
    size_t fill;             /* bytes in block */
} plus_sha256;

void plus_sha256_init(plus_sha256* s);
void plus_sha256_update(plus_sha256* s, const void* data, size_t n);
void plus_sha256_final(plus_sha256* s, uint8_t out[32]);
void plus_sha256_hex(const uint8_t digest[32], char out[65]);

#endif
