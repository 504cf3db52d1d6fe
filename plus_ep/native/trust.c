/* The trust policy for embedded kernel images (trust.h): node digest, trust manifest, Ed25519
 * signatures (system libcrypto, dlopen'ed), the operator's opt-out. */
#define _GNU_SOURCE
#include "trust.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "sha256.h"

/* ---- digest ---- */

static void put_u64(plus_sha256* s, uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    plus_sha256_update(s, b, 8);
}

void plus_trust_digest(const char* plan, const plus_pack_src* packs, int n, uint8_t out[32]) {
    plus_sha256 s;
    plus_sha256_init(&s);
    static const char tag[] = "plus_ep node 1\n";
    plus_sha256_update(&s, tag, sizeof tag - 1);
    size_t len = strlen(plan);
    put_u64(&s, len);
    plus_sha256_update(&s, plan, len);
    uint8_t cnt[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
    plus_sha256_update(&s, cnt, 4);
    int order[PLUS_MAX_ARCHS];   /* packs in strcmp order of arch (insertion sort: at most a few dozen) */
    int m = n < PLUS_MAX_ARCHS ? n : PLUS_MAX_ARCHS;
    for (int i = 0; i < m; i++) {
        int j = i;
        while (j > 0 && strcmp(packs[order[j - 1]].arch, packs[i].arch) > 0) order[j] = order[j - 1], j--;
        order[j] = i;
    }
    for (int k = 0; k < m; k++) {
        const plus_pack_src* p = &packs[order[k]];
        size_t al = strlen(p->arch);
        put_u64(&s, al);
        plus_sha256_update(&s, p->arch, al);
        put_u64(&s, p->size);
        plus_sha256_update(&s, p->data, p->size);
    }
    plus_sha256_final(&s, out);
}

void plus_trust_key_id(const uint8_t key[32], char id[17]) {
    plus_sha256 s;
    uint8_t d[32];
    char hex[65];
    plus_sha256_init(&s);
    plus_sha256_update(&s, key, 32);
    plus_sha256_final(&s, d);
    plus_sha256_hex(d, hex);
    memcpy(id, hex, 16);
    id[16] = 0;
}

/* ---- parsers ---- */

static int b64_value(char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

int plus_trust_b64(const char* s, size_t n, uint8_t* out, size_t want) {
    if (n % 4 || n / 4 * 3 < want || n / 4 * 3 >= want + 3) return -1;
    size_t pad = n - (want + 2) / 3 * 4 + (want % 3 ? 3 - want % 3 : 0);   /* '=' expected at the end */
    size_t got = 0;
    for (size_t i = 0; i < n; i += 4) {
        uint32_t v = 0;
        for (size_t j = 0; j < 4; j++) {
            char c = s[i + j];
            int x = b64_value(c);
            if (x < 0) {
                if (c != '=' || i + j < n - pad) return -1;
                x = 0;
            } else if (i + j >= n - pad) {
                return -1;   /* a digit where padding belongs */
            }
            v = v << 6 | (uint32_t)x;
        }
        for (int j = 0; j < 3; j++)
            if (got < want) out[got++] = (uint8_t)(v >> (16 - 8 * j));
            else if ((v >> (16 - 8 * j)) & 0xff) return -1;   /* non-canonical: bits set in the padding */
    }
    return got == want ? 0 : -1;
}

int plus_trust_parse_keys(const char* text, plus_trust_key* keys, int max, char* err, size_t errlen) {
    int n = 0, line = 0;
    for (const char* p = text; *p;) {
        size_t len = strcspn(p, "\n");
        line++;
        const char* q = p;
        while (q < p + len && (*q == ' ' || *q == '\t' || *q == '\r')) q++;
        if (q < p + len && *q != '#') {
            const char* end = p + len;
            while (end > q && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r')) end--;
            if ((size_t)(end - q) < 8 || strncmp(q, "ed25519 ", 8)) {
                snprintf(err, errlen, "line %d: expected `ed25519 <base64 public key> [comment]`", line);
                return -1;
            }
            const char* k = q + 8;
            while (k < end && *k == ' ') k++;
            size_t kl = strcspn(k, " \t\n\r");
            if (k + kl > end) kl = (size_t)(end - k);
            if (n == max) {
                snprintf(err, errlen, "line %d: more than %d keys", line, max);
                return -1;
            }
            if (plus_trust_b64(k, kl, keys[n].key, 32)) {
                snprintf(err, errlen, "line %d: the key is not the base64 of a 32-byte Ed25519 public key", line);
                return -1;
            }
            plus_trust_key_id(keys[n].key, keys[n].id);
            n++;
        }
        p += len + (p[len] == '\n');
    }
    return n;
}

int plus_trust_parse_signature(const char* text, char id[17], uint8_t sig[64], char* err, size_t errlen) {
    if (strncmp(text, "ed25519 ", 8)) {
        snprintf(err, errlen, "plus_signature does not start with `ed25519 `");
        return -1;
    }
    const char* p = text + 8;
    for (int i = 0; i < 16; i++)
        if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f'))) {
            snprintf(err, errlen, "plus_signature: the key id is not 16 lower-case hex digits");
            return -1;
        }
    if (p[16] != ' ') {
        snprintf(err, errlen, "plus_signature: expected `ed25519 <key id> <signature>`");
        return -1;
    }
    memcpy(id, p, 16);
    id[16] = 0;
    p += 17;
    if (plus_trust_b64(p, strlen(p), sig, 64)) {
        snprintf(err, errlen, "plus_signature: the signature is not the base64 of 64 bytes");
        return -1;
    }
    return 0;
}

/* ---- Ed25519 through the system's libcrypto ---- */

typedef struct evp_pkey_st EVP_PKEY;
typedef struct evp_md_ctx_st EVP_MD_CTX;
static struct {
    EVP_PKEY* (*new_raw_public_key)(int, void*, const unsigned char*, size_t);
    void (*pkey_free)(EVP_PKEY*);
    EVP_MD_CTX* (*ctx_new)(void);
    void (*ctx_free)(EVP_MD_CTX*);
    int (*verify_init)(EVP_MD_CTX*, void**, const void*, void*, EVP_PKEY*);
    int (*verify)(EVP_MD_CTX*, const unsigned char*, size_t, const unsigned char*, size_t);
} g_crypto;
static int g_crypto_ok;
static pthread_once_t g_crypto_once = PTHREAD_ONCE_INIT;
#define PLUS_NID_ED25519 1087   /* OpenSSL's NID_ED25519 (EVP_PKEY_ED25519) */

static void load_crypto(void) {
    static const char* const names[] = {"libcrypto.so.3", "libcrypto.so.1.1", "libcrypto.so"};
    void* h = NULL;
    for (size_t i = 0; i < sizeof names / sizeof *names && !h; i++) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) return;
    *(void**)&g_crypto.new_raw_public_key = dlsym(h, "EVP_PKEY_new_raw_public_key");
    *(void**)&g_crypto.pkey_free = dlsym(h, "EVP_PKEY_free");
    *(void**)&g_crypto.ctx_new = dlsym(h, "EVP_MD_CTX_new");
    *(void**)&g_crypto.ctx_free = dlsym(h, "EVP_MD_CTX_free");
    *(void**)&g_crypto.verify_init = dlsym(h, "EVP_DigestVerifyInit");
    *(void**)&g_crypto.verify = dlsym(h, "EVP_DigestVerify");
    g_crypto_ok = g_crypto.new_raw_public_key && g_crypto.pkey_free && g_crypto.ctx_new && g_crypto.ctx_free &&
                  g_crypto.verify_init && g_crypto.verify;
}

/* 1 valid, 0 invalid, -1 no usable libcrypto. */
static int ed25519_verify(const uint8_t key[32], const uint8_t sig[64], const uint8_t* msg, size_t n) {
    pthread_once(&g_crypto_once, load_crypto);
    if (!g_crypto_ok) return -1;
    EVP_PKEY* k = g_crypto.new_raw_public_key(PLUS_NID_ED25519, NULL, key, 32);
    if (!k) return 0;
    EVP_MD_CTX* c = g_crypto.ctx_new();
    int ok = c && g_crypto.verify_init(c, NULL, NULL, NULL, k) == 1 && g_crypto.verify(c, sig, 64, msg, n) == 1;
    if (c) g_crypto.ctx_free(c);
    g_crypto.pkey_free(k);
    return ok;
}

/* ---- where the manifest lives ---- */

/* The trust dir ($PLUS_EP_TRUST_DIR, else <cache root>/trusted) into buf; "" when none can be named. */
static void trust_dir(char* buf, size_t n) {
    const char* d = getenv("PLUS_EP_TRUST_DIR");
    const char* home = getenv("HOME");
    if (d && *d) {
        if (d[0] == '~' && d[1] == '/' && home) snprintf(buf, n, "%s%s", home, d + 1);
        else snprintf(buf, n, "%s", d);
        return;
    }
    const char* root = getenv("PLUS_EP_CACHE_DIR");
    if (root && *root) {
        if (root[0] == '~' && root[1] == '/' && home) snprintf(buf, n, "%s%s/trusted", home, root + 1);
        else snprintf(buf, n, "%s/trusted", root);
    } else if (home && *home) {
        snprintf(buf, n, "%s/.cache/plus_ep/trusted", home);
    } else {
        buf[0] = 0;
    }
}

static int in_manifest(const char* dir, const char* hex) {
    if (!dir[0]) return 0;
    char path[4096 + 80];
    struct stat st;
    snprintf(path, sizeof path, "%s/%.2s/%s", dir, hex, hex);
    return !stat(path, &st) && S_ISREG(st.st_mode);
}

/* ---- the check ---- */

static atomic_int g_warned;

/* What the node's signature says: 1 signed by a configured key; 0 not (why in `why`). */
static int signed_by_key(const char* signature, const uint8_t digest[32], char* why, size_t wn, char* id_out) {
    char id[17];
    uint8_t sig[64];
    char perr[160];
    if (!signature) return snprintf(why, wn, "no signature"), 0;
    if (plus_trust_parse_signature(signature, id, sig, perr, sizeof perr)) return snprintf(why, wn, "%s", perr), 0;
    const char* path = getenv("PLUS_EP_TRUSTED_KEYS");
    if (!path || !*path) return snprintf(why, wn, "signed by key %s, but PLUS_EP_TRUSTED_KEYS lists no keys", id), 0;
    FILE* f = fopen(path, "rb");
    if (!f) return snprintf(why, wn, "signed by key %s, but PLUS_EP_TRUSTED_KEYS=%s cannot be read", id, path), 0;
    char* text = calloc(1, 1 << 16);
    size_t got = text ? fread(text, 1, (1 << 16) - 1, f) : 0;
    fclose(f);
    if (!text) return snprintf(why, wn, "out of memory"), 0;
    text[got] = 0;
    plus_trust_key* keys = calloc(PLUS_TRUST_MAX_KEYS, sizeof *keys);
    int n = keys ? plus_trust_parse_keys(text, keys, PLUS_TRUST_MAX_KEYS, perr, sizeof perr) : -1;
    free(text);
    int rc = 0;
    if (n < 0) {
        snprintf(why, wn, "PLUS_EP_TRUSTED_KEYS=%s %s", path, keys ? perr : "out of memory");
    } else {
        int k = 0;
        while (k < n && strcmp(keys[k].id, id)) k++;
        if (k == n) {
            snprintf(why, wn, "signed by key %s, which PLUS_EP_TRUSTED_KEYS=%s does not list", id, path);
        } else {
            uint8_t msg[20 + 32];
            memcpy(msg, "plus_ep signature 1\n", 20);
            memcpy(msg + 20, digest, 32);
            int v = ed25519_verify(keys[k].key, sig, msg, sizeof msg);
            if (v > 0) rc = 1, snprintf(id_out, 17, "%s", id);
            else if (v < 0) snprintf(why, wn, "signed by key %s, but no OpenSSL libcrypto (libcrypto.so.3) could be "
                                     "loaded to check it", id);
            else snprintf(why, wn, "the signature by key %s does not match the node's plan and images", id);
        }
    }
    free(keys);
    return rc;
}

int plus_trust_check(const char* node, const char* plan, const plus_pack_src* packs, int n, const char* signature,
                     const plus_trust_opts* o, char* warning, size_t wlen, char* err, size_t errlen) {
    uint8_t digest[32];
    char hex[65], dir[4096], extra[4096 + 16] = "", sigwhy[512] = "", id[17] = "";
    warning[0] = 0;
    const char* env = getenv("PLUS_EP_TRUST");
    int env_any = env && !strcmp(env, "any");
    if (env && *env && !env_any && strcmp(env, "verify")) {
        snprintf(err, errlen, "PlusEP node '%s': PLUS_EP_TRUST='%s' is not a policy: use 'any' (run every model's "
                 "embedded kernels unchecked) or 'verify' (the default)", node, env);
        return -1;
    }
    plus_trust_digest(plan, packs, n, digest);
    plus_sha256_hex(digest, hex);
    trust_dir(dir, sizeof dir);
    if (o && o->cache_dir && *o->cache_dir) snprintf(extra, sizeof extra, "%s/trusted", o->cache_dir);
    if (in_manifest(dir, hex) || in_manifest(extra, hex)) return PLUS_TRUST_MANIFEST;
    if (signed_by_key(signature, digest, sigwhy, sizeof sigwhy, id)) return PLUS_TRUST_SIGNED;
    if (env_any || (o && o->any)) {
        const char* how = env_any ? "PLUS_EP_TRUST=any" : o->any_source ? o->any_source : "the session's option";
        if (!atomic_exchange(&g_warned, 1))
            snprintf(warning, wlen, "PlusEP: %s: the embedded kernels of node '%s' (and of every unverified node "
                     "after it in this process) run without a trust check; a model file can carry any GPU code. "
                     "This warning is printed once per process.", how, node);
        return PLUS_TRUST_OPTOUT;
    }
    snprintf(err, errlen, "PlusEP node '%s': refusing its embedded kernel images: they are not trusted here (node "
             "digest %.16s is in no trust manifest (%s%s%s); %s). Run `plus-ep trust MODEL` on this machine (it "
             "rebuilds the kernels from the node's function body and trusts them when identical), sign the model "
             "(`plus-ep rewrite MODEL -o OUT --sign KEY`) and list the public key in PLUS_EP_TRUSTED_KEYS, or opt out: "
             "PLUS_EP_TRUST=any, or the %s", node, hex, dir[0] ? dir : "no trust dir",
             extra[0] ? ", " : "", extra, sigwhy,
             o && o->any_source ? o->any_source : "session option " PLUS_TRUST_SESSION_KEY "=any");
    return -1;
}
