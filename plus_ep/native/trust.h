/* The trust policy for the kernel images a model file carries (kernels/CONTRACT.md §5; the guide in
 * docs/guide/trust.md). A fused node's images run only when
 *   (a) its node digest (below) is in a trust manifest: a file <trust dir>/<hex[0:2]>/<hex> holding
 *       `"digest": "<hex>"` that this installation wrote when it built those kernels itself
 *       (`plus-ep rewrite`, the rewriter's API), rebuilt them from the node's function body and got the
 *       same bytes (`plus-ep trust MODEL`), or checked a whole-model signature (`plus-ep trust MODEL`
 *       with a signed model); the trust dir is $PLUS_EP_TRUST_DIR, else <cache root>/trusted
 *       ($PLUS_EP_CACHE_DIR or ~/.cache/plus_ep), plus <cache_dir>/trusted for a plugin-EP session with
 *       that option;
 *   (b) its `plus_signature` attribute is an Ed25519 signature of the digest by a key listed in the
 *       file $PLUS_EP_TRUSTED_KEYS (verified with the system's OpenSSL libcrypto, loaded at run time);
 *   (c) the operator opted out: PLUS_EP_TRUST=any (every model), or the session's option (custom op:
 *       session config entry plus_ep.trust=any; plugin EP: provider option trust=any); the first node
 *       admitted that way in a process logs one warning.
 * A trust dir or keys file that another user could change (not owned by this user or root, or writable
 * by group or others, itself or a folder above it: ssh's StrictModes rule) counts for nothing, and the
 * refusal says which path and the chmod/chown that fixes it.
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
#define PLUS_TRUST_MAX_KEYS_FILE (1 << 20)      /* a keys file larger than this is refused */
#define PLUS_TRUST_N_STRINGS 6

/* The STRING attributes of a fused node the digest covers, in byte order of name (plus_plan required,
 * the others when present). With plus_images_<arch> (uint8 TENSOR) and plus_signature (not covered:
 * it signs the digest) they are every attribute a fused node may carry. */
extern const char* const plus_trust_strings[PLUS_TRUST_N_STRINGS];

typedef struct {
    int any;                  /* the session opted out */
    const char* any_source;   /* how, for the warning ("session option plus_ep.trust=any") */
    const char* cache_dir;    /* a session's cache_dir option (its <cache_dir>/trusted is searched too), or NULL */
} plus_trust_opts;

/* What the digest covers: the whole node as the graph holds it. */
typedef struct {
    const char* domain;                 /* "ai.plus_ep" */
    const char* op_type;                /* "Fused", "FusedHost1" */
    const char* name;                   /* the node's name */
    size_t n_in, n_out;
    const char* const* in_names;        /* "" (or NULL) = the slot is wired to nothing */
    const char* const* out_names;
    const char* str[PLUS_TRUST_N_STRINGS];   /* value of plus_trust_strings[i], NULL when absent */
    size_t str_len[PLUS_TRUST_N_STRINGS];
    const plus_pack_src* packs;         /* every plus_images_<arch>, any order */
    int n_packs;
    /* Every attribute name of the node when the front end can list them (plugin EP), else NULL (custom
     * op: ORT's kernel info has no list; unknown_pack then probes the known archs for packs the plan does
     * not list). */
    const char* const* attr_names;
    size_t n_attr_names;
    const char* unlisted_pack;          /* custom op: a plus_images_<arch> the plan's archs line omits, or NULL */
} plus_trust_node;

enum { PLUS_TRUST_MANIFEST = 1, PLUS_TRUST_SIGNED = 2, PLUS_TRUST_OPTOUT = 3 };

/* sha256 over "plus_ep node 2\n", str(domain), str(op_type), str(name), u32le n_in and one byte per
 * input (1 wired, 0 absent), u32le n_out and one byte per output, u32le count of the STRING attributes
 * present then per attribute in plus_trust_strings order str(name) str(value), u32le pack count then per
 * pack in byte order of arch str(arch) str(pack); str(x) = u64le length, the bytes. Returns 0, or -1 with
 * err ("attribute X is not part of a fused node", a pack the plan's `archs` line does not list, no
 * plus_plan): such a node has no digest and is refused. */
int plus_trust_node_digest(const plus_trust_node* nd, uint8_t out[32], char* err, size_t errlen);

/* Decide for one node before anything of it is loaded. Returns PLUS_TRUST_* (how it is trusted), or
 * -1 with err = "PlusEP node '<node>': ..." naming the digest and the ways out. `warning` gets the
 * one-time opt-out warning (the first node an opt-out admits in this process), else "". */
int plus_trust_check(const plus_trust_node* nd, const char* signature, const plus_trust_opts* o, char* warning,
                     size_t wlen, char* err, size_t errlen);

/* PLUS_EP_TRUST (NULL = unset): 0 verify (unset, "" or "verify"), 1 any, -1 anything else (err says so:
 * no trimming, " any" is refused). */
int plus_trust_policy(const char* value, char* err, size_t errlen);

/* ssh's StrictModes rule for a trust dir or keys file: `path` and every folder above it must be owned
 * by this user or root and not writable by group or others (a folder above it may be when it has the
 * sticky bit, as /tmp). 0 when safe or absent, -1 with err = "<what> <path> ...: chmod go-w <path>" or
 * "...: chown <uid> <path>". */
int plus_trust_safe_path(const char* what, const char* path, char* err, size_t errlen);

/* The arch names of the `archs` line of the plan's `plen` bytes (pointers into buf, at most max); -1 when
 * the plan has no such line. The one reader of that line (the custom op probes these packs). */
int plus_trust_plan_archs(const char* plan, size_t plen, char* buf, size_t bufn, const char** archs, int max);

/* ---- the parsers (exposed for the fuzzer and the tests) ---- */

typedef struct { uint8_t key[32]; char id[17]; } plus_trust_key;
/* A keys file: lines "ed25519 <base64 of the 32-byte raw public key> [comment]" (spaces or tabs between
 * fields), blank lines and lines starting with '#' ignored; `n` bytes of text (a NUL byte is an error).
 * Returns the count (<= max) or -1 with err naming the line. */
int plus_trust_parse_keys(const char* text, size_t n, plus_trust_key* keys, int max, char* err, size_t errlen);
/* Read and parse the keys file at `path` (a folder, an unreadable or unsafe file, one over
 * PLUS_TRUST_MAX_KEYS_FILE bytes: -1 with err). */
int plus_trust_read_keys(const char* path, plus_trust_key* keys, int max, char* err, size_t errlen);
/* `plus_signature`: "ed25519 <key id: 16 hex digits> <base64 of the 64-byte signature>". 0 or -1 (err). */
int plus_trust_parse_signature(const char* text, char id[17], uint8_t sig[64], char* err, size_t errlen);
/* Standard base64 (RFC 4648 §4, '=' padding required) of exactly `want` bytes: 0, or -1. */
int plus_trust_b64(const char* s, size_t n, uint8_t* out, size_t want);
/* The key id: hex of the first 8 bytes of sha256(raw public key). */
void plus_trust_key_id(const uint8_t key[32], char id[17]);

#endif
