/* libFuzzer entry point `trust`: the trust policy's parsers (trust.c) on arbitrary text: a
 * PLUS_EP_TRUSTED_KEYS file (with NUL bytes: its exact length is passed), a `plus_signature` attribute,
 * base64 of any wanted length; and the node digest and the whole check (no manifest, no keys: a refusal
 * naming the node) over a fuzzed node: plan, packs, wiring flags, attribute names. Input: a selector
 * byte, then the text (keys, signature, base64) or plan NUL + packs + signature NUL + flags + names. */
#include <stdio.h>

#include "trust.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fz_in in = {data, size};
    uint8_t sel = fz_u8(&in);
    char err[PLUS_ERR_LEN];
    switch (sel % 4) {
    case 0: {
        size_t len;
        uint8_t* text = fz_blob(&in, in.n, &len);
        plus_trust_key keys[8];
        int n = plus_trust_parse_keys((const char*)text, len, keys, 8, err, sizeof err);
        if (n > 8) abort();
        for (int i = 0; i < n; i++)
            if (strlen(keys[i].id) != 16) abort();
        free(text);
        break;
    }
    case 1: {
        char* text = fz_cstr(&in);
        char id[17];
        uint8_t sig[64];
        if (!plus_trust_parse_signature(text, id, sig, err, sizeof err) && strlen(id) != 16) abort();
        free(text);
        break;
    }
    case 2: {
        size_t want = fz_u8(&in) % 80, len;
        uint8_t* s = fz_blob(&in, in.n, &len);   /* not NUL-terminated: the decoder reads exactly len bytes */
        uint8_t out[80];
        (void)plus_trust_b64((const char*)s, len, out, want);
        free(s);
        break;
    }
    default: {
        char* plan = fz_cstr(&in);
        fz_packs pk;
        fz_read_packs(&in, &pk);
        int n = pk.n;
        plus_pack_src* src = pk.src;
        char* sig = fz_cstr(&in);
        uint8_t flags = fz_u8(&in);
        const char* wired[8];
        for (int i = 0; i < 8; i++) wired[i] = (flags >> i) & 1 ? "x" : "";
        char* extra = fz_cstr(&in);   /* one more attribute name, as the plugin EP lists them */
        const char* names[2] = {"plus_plan", extra};
        plus_trust_node nd = {.domain = "ai.plus_ep", .op_type = "Fused", .name = "node", .n_in = flags % 8,
                              .in_names = wired, .n_out = 1, .out_names = wired + 7, .packs = src, .n_packs = n,
                              .attr_names = extra[0] ? names : NULL, .n_attr_names = extra[0] ? 2 : 0};
        nd.str[4] = plan, nd.str_len[4] = strlen(plan);
        uint8_t d1[32], d2[32];
        char e2[PLUS_ERR_LEN];
        int r1 = plus_trust_node_digest(&nd, d1, err, sizeof err);
        if (n >= 2) {   /* the digest does not depend on the packs' order */
            plus_pack_src t = src[0];
            src[0] = src[1], src[1] = t;
        }
        int r2 = plus_trust_node_digest(&nd, d2, e2, sizeof e2);
        if (r1 != r2 || (!r1 && memcmp(d1, d2, 32))) abort();
        char warning[PLUS_ERR_LEN];
        plus_trust_opts o = {0};
        if (plus_trust_check(&nd, sig[0] ? sig : NULL, &o, warning, sizeof warning, err, sizeof err) >= 0)
            abort();   /* nothing is trusted here: no manifest, no keys, no opt-out */
        fz_free_packs(&pk);
        free(extra);
        free(sig);
        free(plan);
        break;
    }
    }
    return 0;
}
