/* The trust policy for embedded kernel images (trust.h): node digest, trust manifest, Ed25519
 * signatures (system libcrypto, dlopen'ed), the folder rule, the operator's opt-out. */
#define _GNU_SOURCE
#include "trust.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sha256.h"

const char* const plus_trust_strings[PLUS_TRUST_N_STRINGS] = {"pattern", "pgraph", "pgraph_hash", "plus_body",
                                                              "plus_plan", "template"};
enum { STR_PLAN = 4 };

/* ---- digest ---- */

static void put_u64(plus_sha256* s, uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    plus_sha256_update(s, b, 8);
}

static void put_u32(plus_sha256* s, uint32_t v) {
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    plus_sha256_update(s, b, 4);
}

static void put_str(plus_sha256* s, const void* p, size_t n) {
    put_u64(s, n);
    plus_sha256_update(s, p, n);
}

static void put_cstr(plus_sha256* s, const char* p) { put_str(s, p ? p : "", p ? strlen(p) : 0); }

static int known_attr(const char* name) {
    if (!strcmp(name, PLUS_TRUST_SIG_ATTR) || (!strncmp(name, "plus_images_", 12) && name[12])) return 1;
    for (int i = 0; i < PLUS_TRUST_N_STRINGS; i++)
        if (!strcmp(name, plus_trust_strings[i])) return 1;
    return 0;
}

int plus_trust_plan_archs(const char* plan, size_t plen, char* buf, size_t bufn, const char** archs, int max) {
    const char* p = NULL;
    for (size_t i = 0; i + 6 <= plen && !p; i++)
        if ((i == 0 || plan[i - 1] == '\n') && !memcmp(plan + i, "archs ", 6)) p = plan + i + 6;
    if (!p) return -1;
    size_t len = 0;
    while (p + len < plan + plen && p[len] != '\n') len++;
    if (len >= bufn) len = bufn - 1;
    memcpy(buf, p, len);
    buf[len] = 0;
    int n = 0;
    char* save = NULL;
    for (char* t = strtok_r(buf, " ", &save); t && n < max; t = strtok_r(NULL, " ", &save)) archs[n++] = t;
    return n;
}

int plus_trust_node_digest(const plus_trust_node* nd, uint8_t out[32], char* err, size_t errlen) {
    if (!nd->str[STR_PLAN]) return snprintf(err, errlen, "the node carries no plus_plan attribute"), -1;
    for (size_t i = 0; nd->attr_names && i < nd->n_attr_names; i++)
        if (!known_attr(nd->attr_names[i]))
            return snprintf(err, errlen, "attribute '%s' is not part of a fused node (kernels/CONTRACT.md §5)",
                            nd->attr_names[i]), -1;
    if (nd->unlisted_pack)
        return snprintf(err, errlen, "attribute plus_images_%s: the plan's `archs` line does not list %s",
                        nd->unlisted_pack, nd->unlisted_pack), -1;
    if (nd->n_packs < 0 || nd->n_packs > PLUS_MAX_ARCHS)
        return snprintf(err, errlen, "more than %d plus_images_<arch> attributes", PLUS_MAX_ARCHS), -1;
    char buf[1024];
    const char* listed[PLUS_MAX_ARCHS];
    int n_listed = plus_trust_plan_archs(nd->str[STR_PLAN], nd->str_len[STR_PLAN], buf, sizeof buf, listed,
                                         PLUS_MAX_ARCHS);
    int order[PLUS_MAX_ARCHS];   /* packs in strcmp order of arch (insertion sort: at most a few dozen) */
    for (int i = 0; i < nd->n_packs; i++) {
        int j = i;
        int c = 0;
        while (j > 0 && (c = strcmp(nd->packs[order[j - 1]].arch, nd->packs[i].arch)) > 0) order[j] = order[j - 1], j--;
        if (j > 0 && !strcmp(nd->packs[order[j - 1]].arch, nd->packs[i].arch))
            return snprintf(err, errlen, "two plus_images_%s attributes", nd->packs[i].arch), -1;
        order[j] = i;
        int k = 0;
        while (n_listed >= 0 && k < n_listed && strcmp(listed[k], nd->packs[i].arch)) k++;
        if (n_listed >= 0 && k == n_listed)
            return snprintf(err, errlen, "attribute plus_images_%s: the plan's `archs` line does not list %s",
                            nd->packs[i].arch, nd->packs[i].arch), -1;
    }
    for (int k = 0; k < n_listed; k++) {
        int i = 0;
        while (i < nd->n_packs && strcmp(listed[k], nd->packs[i].arch)) i++;
        if (i == nd->n_packs)
            return snprintf(err, errlen, "the plan's `archs` line lists %s but the node has no attribute "
                            "plus_images_%s", listed[k], listed[k]), -1;
    }
    plus_sha256 s;
    plus_sha256_init(&s);
    static const char tag[] = "plus_ep node 2\n";
    plus_sha256_update(&s, tag, sizeof tag - 1);
    put_cstr(&s, nd->domain);
    put_cstr(&s, nd->op_type);
    put_cstr(&s, nd->name);
    const size_t counts[2] = {nd->n_in, nd->n_out};
    const char* const* names[2] = {nd->in_names, nd->out_names};
    for (int io = 0; io < 2; io++) {
        put_u32(&s, (uint32_t)counts[io]);
        for (size_t i = 0; i < counts[io]; i++) {
            uint8_t wired = names[io] && names[io][i] && names[io][i][0];
            plus_sha256_update(&s, &wired, 1);
        }
    }
    uint32_t present = 0;
    for (int i = 0; i < PLUS_TRUST_N_STRINGS; i++) present += nd->str[i] != NULL;
    put_u32(&s, present);
    for (int i = 0; i < PLUS_TRUST_N_STRINGS; i++)
        if (nd->str[i]) {
            put_cstr(&s, plus_trust_strings[i]);
            put_str(&s, nd->str[i], nd->str_len[i]);
        }
    put_u32(&s, (uint32_t)nd->n_packs);
    for (int k = 0; k < nd->n_packs; k++) {
        const plus_pack_src* p = &nd->packs[order[k]];
        put_cstr(&s, p->arch);
        put_str(&s, p->data, p->size);
    }
    plus_sha256_final(&s, out);
    return 0;
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

static int is_sp(char c) { return c == ' ' || c == '\t' || c == '\r'; }

int plus_trust_parse_keys(const char* text, size_t n, plus_trust_key* keys, int max, char* err, size_t errlen) {
    int count = 0, line = 0;
    const char* end_all = text + n;
    for (const char* p = text; p < end_all;) {
        const char* nl = memchr(p, '\n', (size_t)(end_all - p));
        const char* end = nl ? nl : end_all;
        line++;
        if (memchr(p, 0, (size_t)(end - p))) {
            snprintf(err, errlen, "line %d: a NUL byte (not a text file)", line);
            return -1;
        }
        const char* q = p;
        while (q < end && is_sp(*q)) q++;
        while (end > q && is_sp(end[-1])) end--;
        if (q < end && *q != '#') {
            if (end - q < 8 || strncmp(q, "ed25519", 7) || (q[7] != ' ' && q[7] != '\t')) {
                snprintf(err, errlen, "line %d: expected `ed25519 <base64 public key> [comment]`", line);
                return -1;
            }
            const char* k = q + 7;
            while (k < end && is_sp(*k)) k++;
            size_t kl = 0;
            while (k + kl < end && !is_sp(k[kl])) kl++;
            if (count == max) {
                snprintf(err, errlen, "line %d: more than %d keys", line, max);
                return -1;
            }
            if (plus_trust_b64(k, kl, keys[count].key, 32)) {
                snprintf(err, errlen, "line %d: the key is not the base64 of a 32-byte Ed25519 public key", line);
                return -1;
            }
            plus_trust_key_id(keys[count].key, keys[count].id);
            count++;
        }
        p = nl ? nl + 1 : end_all;
    }
    return count;
}

int plus_trust_read_keys(const char* path, plus_trust_key* keys, int max, char* err, size_t errlen) {
    char why[1024];
    if (plus_trust_safe_path("PLUS_EP_TRUSTED_KEYS", path, why, sizeof why)) return snprintf(err, errlen, "%s", why), -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) {
        int e = errno;
        if (fd >= 0) close(fd);
        return snprintf(err, errlen, "PLUS_EP_TRUSTED_KEYS=%s cannot be read (%s)", path, strerror(e)), -1;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return snprintf(err, errlen, "PLUS_EP_TRUSTED_KEYS=%s is %s, not a keys file", path,
                        S_ISDIR(st.st_mode) ? "a folder" : "not a regular file"), -1;
    }
    if (st.st_size > PLUS_TRUST_MAX_KEYS_FILE) {
        close(fd);
        return snprintf(err, errlen, "PLUS_EP_TRUSTED_KEYS=%s is larger than %d bytes", path,
                        PLUS_TRUST_MAX_KEYS_FILE), -1;
    }
    size_t size = (size_t)st.st_size, got = 0;
    char* text = malloc(size + 1);
    if (!text) return close(fd), snprintf(err, errlen, "out of memory"), -1;
    while (got < size) {
        ssize_t r = read(fd, text + got, size - got);
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    char perr[256];
    int n = plus_trust_parse_keys(text, got, keys, max, perr, sizeof perr);
    free(text);
    if (n < 0) snprintf(err, errlen, "PLUS_EP_TRUSTED_KEYS=%s %s", path, perr);
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

/* ---- policy, folders ---- */

int plus_trust_policy(const char* value, char* err, size_t errlen) {
    if (!value || !*value || !strcmp(value, "verify")) return 0;
    if (!strcmp(value, "any")) return 1;
    snprintf(err, errlen, "PLUS_EP_TRUST='%s' is not a policy: use 'any' (run every model's embedded kernels "
             "unchecked) or 'verify' (the default)", value);
    return -1;
}

int plus_trust_safe_path(const char* what, const char* path, char* err, size_t errlen) {
    char real[PATH_MAX];
    if (!path || !*path || !realpath(path, real)) return 0;   /* absent: nothing in it counts anyway */
    uid_t me = geteuid();
    for (size_t len = strlen(real);;) {
        struct stat st;
        char at[PATH_MAX];
        memcpy(at, real, len);
        at[len ? len : 1] = 0;
        if (!len) at[0] = '/';
        int self = len == strlen(real);
        if (!stat(at, &st)) {
            const char* which = self ? "" : "the folder ";
            if (st.st_uid != me && st.st_uid != 0) {
                if (self) snprintf(err, errlen, "%s %s is owned by uid %u, not by you (uid %u) or root: chown %u %s",
                                   what, real, (unsigned)st.st_uid, (unsigned)me, (unsigned)me, at);
                else snprintf(err, errlen, "%s %s: %s%s above it is owned by uid %u, not by you (uid %u) or root: "
                              "chown %u %s", what, real, which, at, (unsigned)st.st_uid, (unsigned)me, (unsigned)me, at);
                return -1;
            }
            if ((st.st_mode & 022) && (self || !S_ISDIR(st.st_mode) || !(st.st_mode & S_ISVTX))) {
                if (self) snprintf(err, errlen, "%s %s is writable by group or others (mode %04o): chmod go-w %s", what,
                                   real, (unsigned)(st.st_mode & 07777), at);
                else snprintf(err, errlen, "%s %s: %s%s above it is writable by group or others (mode %04o): chmod "
                              "go-w %s", what, real, which, at, (unsigned)(st.st_mode & 07777), at);
                return -1;
            }
        }
        if (len <= 1) break;
        while (len > 1 && real[len - 1] != '/') len--;   /* to the parent */
        if (len > 1) len--;                               /* drop the '/' (keep "/" itself) */
    }
    return 0;
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

/* Owned by this user or root, writable by nobody else. */
static int private_to_me(const struct stat* st) {
    return (st->st_uid == geteuid() || st->st_uid == 0) && !(st->st_mode & 022);
}

/* 1 when <dir>/<hex[:2]>/<hex> is a regular file that names this digest ("digest": "<hex>"). */
static int in_manifest(const char* dir, const char* hex) {
    if (!dir[0]) return 0;
    char path[4096 + 80];
    snprintf(path, sizeof path, "%s/%.2s/%s", dir, hex, hex);
    struct stat st;
    char shard[4096 + 8];
    snprintf(shard, sizeof shard, "%s/%.2s", dir, hex);
    if (stat(shard, &st) || !private_to_me(&st)) return 0;   /* a shard another user can change counts for nothing */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return 0;
    char text[4096];
    ssize_t got = 0;
    if (!fstat(fd, &st) && S_ISREG(st.st_mode) && private_to_me(&st) && st.st_size < (off_t)sizeof text)
        got = read(fd, text, sizeof text - 1);
    close(fd);
    if (got <= 0) return 0;
    text[got] = 0;
    char want[64 + 16];
    snprintf(want, sizeof want, "\"digest\": \"%s\"", hex);
    return strstr(text, want) != NULL;
}

/* Where the manifest `dir` stands: 1 searched (safe), 0 not (why appended to `why`). */
static int usable_dir(const char* dir, char* why, size_t wn) {
    char e[1024];
    if (!dir[0] || !plus_trust_safe_path("trust folder", dir, e, sizeof e)) return 1;
    size_t l = strlen(why);
    snprintf(why + l, wn - l, "%s%s", l ? "; " : "", e);
    return 0;
}

/* ---- the check ---- */

static atomic_int g_warned;

/* What the node's signature says: 1 signed by a configured key; 0 not (why in `why`). */
static int signed_by_key(const char* signature, const uint8_t digest[32], char* why, size_t wn, char* id_out) {
    char id[17];
    uint8_t sig[64];
    char perr[1024];
    if (!signature) return snprintf(why, wn, "no signature"), 0;
    if (plus_trust_parse_signature(signature, id, sig, perr, sizeof perr)) return snprintf(why, wn, "%s", perr), 0;
    const char* path = getenv("PLUS_EP_TRUSTED_KEYS");
    if (!path || !*path) return snprintf(why, wn, "signed by key %s, but PLUS_EP_TRUSTED_KEYS lists no keys", id), 0;
    plus_trust_key* keys = calloc(PLUS_TRUST_MAX_KEYS, sizeof *keys);
    if (!keys) return snprintf(why, wn, "out of memory"), 0;
    int n = plus_trust_read_keys(path, keys, PLUS_TRUST_MAX_KEYS, perr, sizeof perr);
    int rc = 0;
    if (n < 0) {
        snprintf(why, wn, "signed by key %s, but %s", id, perr);
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
            else snprintf(why, wn, "the signature by key %s does not match the node", id);
        }
    }
    free(keys);
    return rc;
}

int plus_trust_check(const plus_trust_node* nd, const char* signature, const plus_trust_opts* o, char* warning,
                     size_t wlen, char* err, size_t errlen) {
    uint8_t digest[32];
    char hex[65], dir[4096], extra[4096 + 16] = "", sigwhy[1536] = "", id[17] = "", perr[1024], dirwhy[2200] = "";
    const char* node = nd->name ? nd->name : "?";
    warning[0] = 0;
    int env_any = plus_trust_policy(getenv("PLUS_EP_TRUST"), perr, sizeof perr);
    if (env_any < 0) return snprintf(err, errlen, "PlusEP node '%s': %s", node, perr), -1;
    if (plus_trust_node_digest(nd, digest, perr, sizeof perr)) {
        snprintf(err, errlen, "PlusEP node '%s': refusing its embedded kernel images: %s; rewrite the original model "
                 "with `plus-ep rewrite`", node, perr);
        return -1;
    }
    plus_sha256_hex(digest, hex);
    trust_dir(dir, sizeof dir);
    if (o && o->cache_dir && *o->cache_dir) snprintf(extra, sizeof extra, "%s/trusted", o->cache_dir);
    if ((usable_dir(dir, dirwhy, sizeof dirwhy) && in_manifest(dir, hex)) ||
        (extra[0] && usable_dir(extra, dirwhy, sizeof dirwhy) && in_manifest(extra, hex)))
        return PLUS_TRUST_MANIFEST;
    if (signed_by_key(signature, digest, sigwhy, sizeof sigwhy, id)) return PLUS_TRUST_SIGNED;
    if (env_any || (o && o->any)) {
        const char* how = env_any ? "PLUS_EP_TRUST=any" : o->any_source ? o->any_source : "the session's option";
        if (!atomic_exchange(&g_warned, 1))
            snprintf(warning, wlen, "PlusEP: %s: the embedded kernels of node '%s' (and of every unverified node "
                     "after it in this process) run without a trust check; a model file can carry any GPU code. "
                     "This warning is printed once per process.", how, node);
        return PLUS_TRUST_OPTOUT;
    }
    if (dirwhy[0]) {
        snprintf(err, errlen, "PlusEP node '%s': refusing its embedded kernel images: %s (a folder another user can "
                 "change decides nothing; node digest %.16s; %s)", node, dirwhy, hex, sigwhy);
        return -1;
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
