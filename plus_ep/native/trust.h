/* The trust policy for the kernel images a model file carries (kernels/CONTRACT.md §5; the design in
 * docs/design-notes.md "A model file is data"). A fused node's images run only when
 *   (a) its node digest (plan + every image pack) is in a trust manifest: a file
 *       <trust dir>/<hex[0:2]>/<hex> that this installation wrote when it built those kernels itself
 *       (`plus-ep rewrite`, the rewriter's API) or rebuilt them from the node's function body and got
 *       the same bytes (`plus-ep trust MODEL`); the trust dir is $PLUS_EP_TRUST_DIR, else
 *       <cache root>/trusted ($PLUS_EP_CACHE_DIR or ~/.cache/plus_ep), plus <cache_dir>/trusted for a
 *       plugin-EP session with that option;
 *   (b) its `plus_signature` attribute is an Ed25519 signature of the digest by a key listed in the
 *       file $PLUS_EP_TRUSTED_KEYS (verified with the system's OpenSSL libcrypto, loaded at run time);
 *   (c) the operator opted out: PLUS_EP_TRUST=any (every model), or the session's option (custom op:
 *       session config entry plus_ep.trust=any; plugin EP: provider option trust=any); the first node
 *       admitted that way in a process logs one warning.
 * Otherwise the node is refused at session creation with an error naming it and the ways out.
 * Pure C (libcrypto is dlopen'ed only to check a signature). */
#ifndef PLUS_TRUST_H
#define PLUS_TRUST_H

#include <stddef.h>
#include <stdint.h>

#include "kernel.h"

#define PLUS_TRUST_SIG_ATTR "plus_signature"
#define PLUS_TRUST_SESSION_KEY "plus_ep.trust"   /* custom op: session config entry */
#define PLUS_TRUST_MAX_KEYS 64

typedef struct {
    int any;                  /* the session opted out */
    const char* any_source;   /* how, for the warning ("session option plus_ep.trust=any") */
    const char* cache_dir;    /* a session's cache_dir option (its <cache_dir>/trusted is searched too), or NULL */
} plus_trust_opts;

enum { PLUS_TRUST_MANIFEST = 1, PLUS_TRUST_SIGNED = 2, PLUS_TRUST_OPTOUT = 3 };

/* sha256 over "plus_ep node 1\n", u64le plan length, the plan, u32le pack count, then per pack in
 * strcmp order of arch: u64le arch length, the arch, u64le pack length, the pack. */
void plus_trust_digest(const char* plan, const plus_pack_src* packs, int n, uint8_t out[32]);

/* Decide for one node before anything of it is loaded. Returns PLUS_TRUST_* (how it is trusted), or
 * -1 with err = "PlusEP node '<node>': ..." naming the digest and the ways out. `warning` gets the
 * one-time opt-out warning (the first node an opt-out admits in this process), else "". */
int plus_trust_check(const char* node, const char* plan, const plus_pack_src* packs, int n, const char* signature,
                     const plus_trust_opts* o, char* warning, size_t wlen, char* err, size_t errlen);

/* ---- the parsers (exposed for the fuzzer and the tests) ---- */

typedef struct { uint8_t key[32]; char id[17]; } plus_trust_key;
/* A keys file: lines "ed25519 <base64 of the 32-byte raw public key> [comment]", blank lines and
 * lines starting with '#' ignored. Returns the count (<= max) or -1 with err naming the line. */
int plus_trust_parse_keys(const char* text, plus_trust_key* keys, int max, char* err, size_t errlen);
/* `plus_signature`: "ed25519 <key id: 16 hex digits> <base64 of the 64-byte signature>". 0 or -1 (err). */
int plus_trust_parse_signature(const char* text, char id[17], uint8_t sig[64], char* err, size_t errlen);
/* Standard base64 (RFC 4648 §4, '=' padding required) of exactly `want` bytes: 0, or -1. */
int plus_trust_b64(const char* s, size_t n, uint8_t* out, size_t want);
/* The key id: hex of the first 8 bytes of sha256(raw public key). */
void plus_trust_key_id(const uint8_t key[32], char id[17]);

#endif
