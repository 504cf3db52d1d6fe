/* EPContext models (ONNX Runtime's ahead-of-time form) for the PlusEP plugin EP: OrtEp::Compile writes one
 * com.microsoft::EPContext node per compiled node when the session asks for it (ep.context_enable=1, as
 * onnxruntime.ModelCompiler does), and GetCapability/Compile take EPContext nodes whose `source` is
 * "PlusEP" without planning or rewriting anything again. docs/guide/epcontext.md has the user's side.
 *
 * The node (schema attributes only): source "PlusEP", main_context 1, embed_mode, ep_sdk_version
 * "PlusEP <version>", partition_name (the fused node's name), hardware_architecture (the archs of its
 * packs) and ep_cache_context: the payload (embed_mode 1) or the name of a side file beside the EPContext
 * model holding it (embed_mode 0; a relative path without "..", resolved against the model's folder).
 *
 * Payload (little-endian), the same bytes plus_ep/epcontext.py writes and reads:
 *   "PLUSEPCTX1\n", then records: uint8 tag, uint64 length, that many bytes; tags
 *     'P' a kernel part begins: its node name (a Fused node of the rewrite)
 *     'H' a host part begins: its name (shape computations ORT runs on the CPU, ep_chain.c)
 *     'L' the kernel part's plan (kernels/CONTRACT.md §3)
 *     'A' its image pack: uint16 arch length, the arch, the pack (§4)
 *     'S' its plus_signature (§5), optional
 *     'T' its op type, 'N' every attribute name ('\n'-joined), 'V' one STRING attribute the trust digest
 *         covers (uint16 name length, the name, the value): the Fused node as the digest saw it (§5)
 *     'M' the host part's ONNX model
 *     'I' / 'O' the part's inputs / outputs in order, '\n'-joined: "#k" = the EPContext node's input (output)
 *         k, "" = absent (an output: not used), any other name = a tensor inside the node (a constant, or
 *         an earlier part's output). Positions, not names, for the node's own inputs and outputs: ONNX
 *         Runtime's graph optimizations rename an EPContext node's inputs when it loads the model
 *     'C' a constant of the node: uint16 name length, the name, int32 ONNX dtype, uint8 rank, rank x int64
 *         dims, the data
 *     'E' the end (length 0, last)
 * The payload's kernels are trust-checked exactly as a Fused node's (trust.h), part by part, before
 * anything of them is loaded. */
#ifndef PLUS_EP_CONTEXT_H
#define PLUS_EP_CONTEXT_H

#include <stddef.h>
#include <stdint.h>

#include "ep_abi.h"
#include "kernel.h"

#define PLUS_CTX_MAX_PARTS 64
#define PLUS_CTX_MAX_CONSTS 4096
#define PLUS_CTX_MAX_STRS 16
#define PLUS_CTX_MAGIC "PLUSEPCTX1\n"
#define PLUS_CTX_EMBED_MAGIC "PLUSEPCTX1Z"

/* The session's EPContext options (session config entries). */
typedef struct {
    int enable;               /* ep.context_enable=1: Compile writes EPContext nodes */
    int embed;                /* ep.context_embed_mode (default 1) */
    char file_path[4096];     /* ep.context_file_path: the EPContext model to be written ("" = derived) */
} plus_ctx_config;

OrtStatus* plus_ctx_read_config(const OrtSessionOptions* so, plus_ctx_config* out);

/* One part of a compiled node (a view: the caller owns every pointer): what Compile builds from (a Fused
 * node, a planned group, a payload) and what a payload holds. */
typedef struct {
    int kind;                          /* PLUS_PART_KERNEL, PLUS_PART_HOST (ep_base.h) */
    const char* node;
    const char* const* inputs;         /* tensor names (in a payload: "#k" refs or inner names); "" absent */
    size_t n_inputs;
    const char* const* outputs;        /* "" not used */
    size_t n_outputs;
    const char* plan;                  /* kernel */
    const plus_pack_src* packs;
    int n_packs;
    const char* signature;             /* kernel: plus_signature, or NULL */
    /* kernel: what the trust digest covers of the Fused node it was (trust.h) besides the above */
    const char* op_type;               /* "Fused", "FusedHost1", ... */
    const char* const* attr_names;     /* every attribute name of the node */
    size_t n_attr_names;
    const char* const* str_names;      /* its STRING attributes the digest covers (plan included) */
    const char* const* str_values;
    const size_t* str_lens;
    size_t n_strs;
    const uint8_t* model;              /* host: a serialized ONNX model */
    size_t model_size;
} plus_ctx_part;

/* What a kernel part keeps of the Fused node it was (the fields above from op_type to n_strs), owned: the
 * planned group's part and the compiled chain's part hold one each for the EPContext node they may write. */
typedef struct {
    char* op_type;
    char** attr_names;
    size_t n_attr_names;
    char* str_names[PLUS_CTX_MAX_STRS];
    char* str_values[PLUS_CTX_MAX_STRS];
    size_t str_lens[PLUS_CTX_MAX_STRS];
    size_t n_strs;
} plus_ctx_fused;

/* Copy `src`'s fields into `f` (emptied first); 0, or -1 out of memory (f then empty). */
int plus_ctx_fused_set(plus_ctx_fused* f, const plus_ctx_part* src);
/* Add one STRING attribute (`len` bytes); 0, or -1 (full, out of memory). */
int plus_ctx_fused_add_string(plus_ctx_fused* f, const char* name, const uint8_t* value, size_t len);
/* Point `q`'s fields at `f`'s. */
void plus_ctx_fused_view(const plus_ctx_fused* f, plus_ctx_part* q);
void plus_ctx_fused_free(plus_ctx_fused* f);

typedef struct {                       /* a constant a compiled node carries (a view) */
    const char* name;
    int dtype, rank;
    const int64_t* dims;
    const uint8_t* data;
    size_t bytes;
} plus_ctx_const;

/* A decoded payload: its parts, its constants and the storage they point into. */
typedef struct {
    plus_ctx_part parts[PLUS_CTX_MAX_PARTS];
    size_t n;
    plus_ctx_const* consts;
    size_t n_consts;
    void* storage;
} plus_ctx_payload;

/* 1 when `n` is an EPContext node PlusEP wrote (domain com.microsoft, op EPContext, source "PlusEP"). */
int plus_ctx_is_node(const OrtNode* n);

/* Read, decode and check the payload of the EPContext node `n` (graph: for the model's folder). Errors
 * name the node and what to do. */
OrtStatus* plus_ctx_load(const OrtGraph* graph, const OrtNode* n, plus_ctx_payload* out);
void plus_ctx_payload_free(plus_ctx_payload* p);

/* The EPContext node for the fused node ORT compiled (its inputs and outputs), carrying `parts` and
 * `consts` (their names as the payload has them: "#k" refs). Writes the side file in embed mode 0. */
OrtStatus* plus_ctx_make_node(const plus_ctx_config* cfg, const OrtGraph* graph, const OrtNode* fused,
                              const plus_ctx_part* parts, size_t n_parts, const plus_ctx_const* consts,
                              size_t n_consts, OrtNode** out);

/* A payload part's inputs and outputs as tensor names of the EPContext node `ctx_node` as ONNX Runtime
 * holds it: "#k" -> its input (output) k, other names kept; arrays of n_inputs / n_outputs, malloc'ed. */
OrtStatus* plus_ctx_names(const OrtNode* ctx_node, const plus_ctx_part* part, const char*** in, const char*** out);

/* The codec (exposed for tests): encode to a malloc'ed raw payload; decode raw or embedded bytes. */
int plus_ctx_encode(const plus_ctx_part* parts, size_t n, const plus_ctx_const* consts, size_t n_consts, uint8_t** out,
                    size_t* len);
int plus_ctx_decode(const uint8_t* data, size_t len, plus_ctx_payload* out, char* err, size_t errlen);

#endif
