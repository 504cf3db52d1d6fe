/* libFuzzer entry point `ortop`: the custom-op glue (ort_op.c) between ONNX Runtime and the launcher,
 * with everything ORT would hand it coming from the fuzz input: the node's attributes (plus_plan, the
 * plus_images_<arch> tensors with any element type and size, input names), then, for one
 * CreateKernelV2 that succeeded, a KernelComputeV2 whose input tensors (element type, rank, dims,
 * data) and output allocation come from the input too, and the op's shape inference on the same
 * plan. The OrtValue reader (ort_tensor.c), binding, host staging (CPU twin) and launches on a stream
 * (CUDA twin) all run against the fuzzers' stand-in driver (fuzz_driver.c). Tensors are what ORT could
 * really hand over: dims >= 0, data of exactly the size the dims give (at most FZ_MAX_ELEMS elements,
 * else the compute is skipped), any rank and element type. Every OrtApi slot ort_op.c does not call
 * is NULL (a call to one crashes: a finding).
 * Absent tensors as ORT can hand them over: an input or output the node wires "" (its name is "",
 * and at run time no tensor), an input with a name for which KernelContext_GetInput still gives NULL,
 * and KernelContext_GetOutput giving NULL.
 * Input: op byte (bit 0: the CPU twin; the rest: FusedHost<n>), node name NUL, plan NUL, attribute
 * count byte, per attribute an arch NUL + element type byte + uint16 LE length + bytes, input count
 * byte, per input a control byte (+ element type byte, rank byte, dims, values), output type byte,
 * output wiring byte (bit 0: output (byte >> 1) % n wired "", bit 5: GetOutput hands over NULL). */
#define _GNU_SOURCE
#include <stdio.h>

#include "ort_abi.h"
#include "fuzz_util.h"
#include "fuzz_driver.h"

OrtStatus* RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base);

struct OrtStatus { int code; char msg[PLUS_ERR_LEN * 2]; };
typedef struct {
    int kind; int dtype; size_t rank; int64_t dims[16]; void* data; size_t count, bytes;
    int absent;   /* 1: wired "" (no name, no tensor); 2: named, but no tensor at run time */
} value;   /* kind 0 */
typedef struct { char arch[PLUS_NAME_LEN]; int dtype; uint8_t* data; size_t size; } attr;
#include "../ort_standin.h"   /* statuses and tensor reads over `value` */

static const OrtCustomOp* g_ops[64];
static int g_n_ops;
static ort_fnptr g_table[428];
static void (*g_set_cc)(int);
static long (*g_live)(void);

/* what this run's ORT answers */
static char* g_node;
static char* g_plan;
static attr g_attr[4];
static int g_n_attr;
static value g_in[PLUS_MAX_IN + 2];
static size_t g_n_in;
static value g_out[PLUS_MAX_OUT];
static int g_out_dtype;   /* 0: the type the plan declares */
static int g_plan_out[PLUS_MAX_OUT], g_n_out;   /* the plan's output types, as the graph would give them */
static int g_stream_obj;
static int g_out_unwired = -1, g_out_null;   /* output wired "" (-1: none); GetOutput gives NULL */
static long g_live_values, g_scratch;

static OrtStatus* f_CreateCustomOpDomain(const char* name, OrtCustomOpDomain** out) {
    (void)name;
    *out = (OrtCustomOpDomain*)&g_n_ops;
    return NULL;
}
static OrtStatus* f_CustomOpDomain_Add(OrtCustomOpDomain* d, const OrtCustomOp* op) {
    (void)d;
    if (g_n_ops < 64) g_ops[g_n_ops++] = op;
    return NULL;
}
static OrtStatus* f_AddCustomOpDomain(OrtSessionOptions* o, OrtCustomOpDomain* d) { (void)o, (void)d; return NULL; }

static OrtStatus* copy_str(const char* s, char* out, size_t* n) {
    size_t need = strlen(s) + 1;
    if (out) {
        if (*n < need) {
            *n = need;
            return status(ORT_INVALID_ARGUMENT, "Result buffer is not large enough");
        }
        memcpy(out, s, need);
    }
    *n = need;
    return NULL;
}
static OrtStatus* f_KernelInfoGetAttribute_string(const OrtKernelInfo* i, const char* name, char* out, size_t* n) {
    (void)i;
    if (strcmp(name, "plus_plan") || !g_plan) return status(ORT_FAIL, "No attribute with this name");
    return copy_str(g_plan, out, n);
}
static OrtStatus* f_KernelInfoGetAttribute_tensor(const OrtKernelInfo* i, const char* name, OrtAllocator* a,
                                                  OrtValue** out) {
    (void)i, (void)a;
    for (int k = 0; k < g_n_attr; k++) {
        char want[PLUS_NAME_LEN + 16];
        snprintf(want, sizeof want, "plus_images_%s", g_attr[k].arch);
        if (strcmp(name, want)) continue;
        value* v = calloc(1, sizeof *v);
        size_t es = fz_elsize(g_attr[k].dtype);
        v->dtype = g_attr[k].dtype, v->rank = 1, v->count = es ? g_attr[k].size / es : 0;
        v->dims[0] = (int64_t)v->count;
        v->data = g_attr[k].data;
        g_live_values++;
        *out = (OrtValue*)v;
        return NULL;
    }
    return status(ORT_FAIL, "No attribute with this name");
}
static void f_ReleaseValue(OrtValue* v) { free(v); g_live_values--; }
static OrtStatus* f_KernelInfo_GetInputCount(const OrtKernelInfo* i, size_t* n) { (void)i; *n = g_n_in; return NULL; }
static OrtStatus* f_KernelInfo_GetInputName(const OrtKernelInfo* i, size_t k, char* out, size_t* n) {
    (void)i;
    char name[32] = "";
    if (k < g_n_in && g_in[k].absent != 1) snprintf(name, sizeof name, "input_%zu", k);
    return copy_str(name, out, n);
}
static OrtStatus* f_KernelInfo_GetOutputCount(const OrtKernelInfo* i, size_t* n) {
    (void)i;
    *n = (size_t)g_n_out;
    return NULL;
}
static OrtStatus* f_KernelInfo_GetOutputName(const OrtKernelInfo* i, size_t k, char* out, size_t* n) {
    (void)i;
    if (k >= (size_t)g_n_out) return status(ORT_INVALID_ARGUMENT, "output index out of range");
    return copy_str((int)k == g_out_unwired ? "" : "output", out, n);
}
static OrtStatus* f_KernelInfo_GetNodeName(const OrtKernelInfo* i, char* out, size_t* n) {
    (void)i;
    return copy_str(g_node, out, n);
}
static OrtStatus* f_KernelInfo_GetLogger(const OrtKernelInfo* i, const OrtLogger** out) {
    (void)i;
    *out = (const OrtLogger*)&g_n_ops;
    return NULL;
}
static OrtStatus* f_Logger_LogMessage(const OrtLogger* l, int level, const char* msg, const char* file, int line,
                                      const char* fn) {
    (void)l, (void)level, (void)file, (void)line, (void)fn;
    if (!memchr(msg, 0, 1 << 16)) abort();
    return NULL;
}
static const OrtMemoryInfo* alloc_info(const OrtAllocator* a) { (void)a; return (const OrtMemoryInfo*)&g_n_ops; }
static OrtAllocator g_alloc = {.version = 18, .Info = alloc_info};
static OrtStatus* f_GetAllocatorWithDefaultOptions(OrtAllocator** out) { *out = &g_alloc; return NULL; }
static OrtStatus* f_KernelInfoGetAllocator(const OrtKernelInfo* i, int mem, OrtAllocator** out) {
    (void)i, (void)mem;
    *out = &g_alloc;
    return NULL;
}
static void f_ReleaseAllocator(OrtAllocator* a) { (void)a; }
static OrtStatus* f_AllocatorFree(OrtAllocator* a, void* p) { (void)a; free(p); g_scratch--; return NULL; }
static OrtStatus* f_GetDimensions(const OrtTensorTypeAndShapeInfo* t, int64_t* out, size_t n) {
    const value* v = (const value*)t;
    if (n < v->rank) return status(ORT_INVALID_ARGUMENT, "dims buffer too small");
    memcpy(out, v->dims, v->rank * sizeof *out);
    return NULL;
}
static OrtStatus* f_KernelContext_GetInputCount(const OrtKernelContext* c, size_t* n) { (void)c; *n = g_n_in; return NULL; }
static OrtStatus* f_KernelContext_GetOutputCount(const OrtKernelContext* c, size_t* n) {
    (void)c;
    *n = (size_t)g_n_out;
    return NULL;
}
static OrtStatus* f_KernelContext_GetInput(const OrtKernelContext* c, size_t i, const OrtValue** out) {
    (void)c;
    if (i >= g_n_in) return status(ORT_INVALID_ARGUMENT, "input index out of range");
    *out = g_in[i].absent ? NULL : (const OrtValue*)&g_in[i];
    return NULL;
}
static OrtStatus* f_KernelContext_GetOutput(OrtKernelContext* c, size_t i, const int64_t* dims, size_t rank,
                                            OrtValue** out) {
    (void)c;
    if (i >= PLUS_MAX_OUT || rank > 16) return status(ORT_INVALID_ARGUMENT, "output index or rank out of range");
    if (g_out_null || (int)i == g_out_unwired) {   /* ORT hands over no tensor */
        *out = NULL;
        return NULL;
    }
    value* v = &g_out[i];
    free(v->data);
    memset(v, 0, sizeof *v);
    long long elems = 1;
    for (size_t d = 0; d < rank; d++) {
        if (dims[d] < 0) return status(ORT_INVALID_ARGUMENT, "negative output dim");
        v->dims[d] = dims[d];
        if (__builtin_mul_overflow(elems, (long long)dims[d], &elems) || elems > FZ_MAX_ELEMS)
            return status(ORT_FAIL, "Failed to allocate memory (fuzz cap)");
    }
    v->rank = rank;
    v->dtype = g_out_dtype ? g_out_dtype : g_plan_out[i] ? g_plan_out[i] : 1;
    v->count = (size_t)elems;
    v->bytes = (size_t)elems * (fz_elsize(v->dtype) ? fz_elsize(v->dtype) : 1);
    v->data = malloc(v->bytes ? v->bytes : 1);
    *out = (OrtValue*)v;
    return NULL;
}
static OrtStatus* f_KernelContext_GetGPUComputeStream(const OrtKernelContext* c, void** out) {
    (void)c;
    *out = &g_stream_obj;
    return NULL;
}
static OrtStatus* f_KernelContext_GetScratchBuffer(const OrtKernelContext* c, const OrtMemoryInfo* m, size_t n,
                                                   void** out) {
    (void)c, (void)m;
    if (n > (1u << 22)) return status(ORT_FAIL, "Failed to allocate memory");
    *out = malloc(n ? n : 1);
    g_scratch++;
    return NULL;
}
/* shape inference */
static OrtStatus* f_ShapeInferContext_GetAttribute(const OrtShapeInferContext* c, const char* name,
                                                   const OrtOpAttr** out) {
    (void)c;
    *out = !strcmp(name, "plus_plan") && g_plan ? (const OrtOpAttr*)g_plan : NULL;
    return *out ? NULL : status(ORT_FAIL, "no attribute");
}
static OrtStatus* f_ReadOpAttr(const OrtOpAttr* a, int type, void* out, size_t len, size_t* need) {
    const char* s = (const char*)a;
    size_t n = strlen(s);   /* ORT: the string's bytes, no terminating NUL */
    *need = n;
    if (type != ORT_OP_ATTR_STRING) return status(ORT_INVALID_ARGUMENT, "type");
    if (!out) return status(ORT_INVALID_ARGUMENT, "Result buffer is not large enough");
    if (len < n) return status(ORT_INVALID_ARGUMENT, "Result buffer is not large enough");
    memcpy(out, s, n);
    return NULL;
}
static OrtStatus* f_ShapeInferContext_GetInputCount(const OrtShapeInferContext* c, size_t* n) {
    (void)c;
    *n = g_n_in;
    return NULL;
}
static OrtStatus* f_ShapeInferContext_GetInputTypeShape(const OrtShapeInferContext* c, size_t i,
                                                        OrtTensorTypeAndShapeInfo** out) {
    (void)c;
    if (i >= g_n_in) return status(ORT_INVALID_ARGUMENT, "index");
    *out = (OrtTensorTypeAndShapeInfo*)&g_in[i];
    return NULL;
}
static OrtStatus* f_GetSymbolicDimensions(const OrtTensorTypeAndShapeInfo* t, const char** names, size_t n) {
    const value* v = (const value*)t;
    for (size_t d = 0; d < n && d < v->rank; d++) names[d] = d % 2 ? "batch" : "";
    return NULL;
}
typedef struct { int kind; int dtype; size_t rank; int64_t dims[PLUS_MAX_RANK]; } tsi;   /* kind 1 */
static OrtStatus* f_CreateTensorTypeAndShapeInfo(OrtTensorTypeAndShapeInfo** out) {
    tsi* t = calloc(1, sizeof(tsi));
    t->kind = 1;
    *out = (OrtTensorTypeAndShapeInfo*)t;
    g_live_values++;
    return NULL;
}
static OrtStatus* f_SetTensorElementType(OrtTensorTypeAndShapeInfo* t, int d) { ((tsi*)t)->dtype = d; return NULL; }
static OrtStatus* f_SetDimensions(OrtTensorTypeAndShapeInfo* t, const int64_t* dims, size_t n) {
    if (n > PLUS_MAX_RANK) abort();   /* the launcher never declares a rank above its limit */
    ((tsi*)t)->rank = n;
    memcpy(((tsi*)t)->dims, dims, n * sizeof *dims);
    return NULL;
}
static OrtStatus* f_SetSymbolicDimensions(OrtTensorTypeAndShapeInfo* t, const char** names, size_t n) {
    for (size_t d = 0; d < n; d++) {
        if (!names[d]) abort();
        if (((tsi*)t)->dims[d] < 0 && !names[d][0]) abort();   /* an unknown dim always has a name */
    }
    return NULL;
}
static OrtStatus* f_ShapeInferContext_SetOutputTypeShape(const OrtShapeInferContext* c, size_t i,
                                                         const OrtTensorTypeAndShapeInfo* t) {
    (void)c, (void)t;
    if (i >= PLUS_MAX_OUT) abort();
    return NULL;
}
static void release_tsi(OrtTensorTypeAndShapeInfo* t) {
    /* the one release slot serves both kinds: a created info (tsi) or a value's own (nothing to free) */
    if (((const tsi*)t)->kind != 1) return;
    free(t);
    g_live_values--;
}

static const OrtApi* get_api(uint32_t version) { (void)version; return (const OrtApi*)(const void*)g_table; }
static const char* get_version(void) { return "fuzz"; }

int LLVMFuzzerInitialize(int* argc, char*** argv) {
    (void)argc, (void)argv;
    ort_standin_fill(g_table);
#define SET(name) ORT_STANDIN_SET(g_table, name)
    SET(CreateCustomOpDomain); SET(CustomOpDomain_Add); SET(AddCustomOpDomain); SET(KernelInfoGetAttribute_string);
    SET(KernelInfoGetAttribute_tensor); SET(ReleaseValue); SET(KernelInfo_GetInputCount); SET(KernelInfo_GetInputName);
    SET(KernelInfo_GetNodeName); SET(KernelInfo_GetLogger); SET(Logger_LogMessage); SET(GetAllocatorWithDefaultOptions);
    SET(KernelInfoGetAllocator); SET(ReleaseAllocator); SET(AllocatorFree); SET(GetDimensions);
    SET(KernelContext_GetInputCount); SET(KernelContext_GetOutputCount); SET(KernelContext_GetInput);
    SET(KernelContext_GetOutput); SET(KernelContext_GetGPUComputeStream); SET(KernelContext_GetScratchBuffer);
    SET(ShapeInferContext_GetAttribute); SET(ReadOpAttr); SET(ShapeInferContext_GetInputCount);
    SET(ShapeInferContext_GetInputTypeShape); SET(GetSymbolicDimensions); SET(CreateTensorTypeAndShapeInfo);
    SET(SetTensorElementType); SET(SetDimensions); SET(SetSymbolicDimensions); SET(ShapeInferContext_SetOutputTypeShape);
    SET(KernelInfo_GetOutputCount); SET(KernelInfo_GetOutputName);
#undef SET
    g_table[ReleaseTensorTypeAndShapeInfo_slot] = (ort_fnptr)release_tsi;
    const char* why = NULL;
    if (!fuzz_load_driver(&why, &g_set_cc, &g_live)) {
        fprintf(stderr, "fuzz_ortop: %s\n", why);
        abort();
    }
    OrtApiBase base = {get_api, get_version};
    OrtStatus* st = RegisterCustomOps(NULL, &base);
    if (st || g_n_ops < 2) {
        fprintf(stderr, "fuzz_ortop: RegisterCustomOps registered %d ops%s%s\n", g_n_ops, st ? ": " : "",
                st ? st->msg : "");
        abort();
    }
    return 0;
}

/* One input tensor: control byte bit 0-1 == 3: absent; else element type (bit 2: fuzzed), rank
 * (bit 3: fuzzed, up to 12), dims and values. Returns 0 when ORT could not hold it (too big). */
static int make_input(fz_in* in, value* v) {
    memset(v, 0, sizeof *v);
    uint8_t c = fz_u8(in);
    if ((c & 3) == 3) {
        v->absent = c & 0x80 ? 2 : 1;   /* wired "", or named but handed over as NULL */
        return 1;
    }
    v->dtype = c & 4 ? fz_u8(in) % 28 : (c & 0x10 ? 7 : 1);
    v->rank = c & 8 ? fz_u8(in) % 13 : 1 + (c >> 5) % 3;
    long long elems = 1;
    for (size_t d = 0; d < v->rank; d++) {
        int64_t x = fz_dim(in);
        if (x < 0) x = -(x + 1);
        v->dims[d] = x;
        if (__builtin_mul_overflow(elems, (long long)x, &elems) || elems > FZ_MAX_ELEMS) return 0;
    }
    size_t es = fz_elsize(v->dtype);
    v->count = (size_t)elems;
    v->bytes = (size_t)elems * (es ? es : 1);
    v->data = malloc(v->bytes ? v->bytes : 1);
    if (v->count > FZ_INLINE_ELEMS) fz_fill(in, v->data, v->bytes);
    else for (size_t e = 0; e < v->bytes; e++) ((uint8_t*)v->data)[e] = fz_u8(in) % 8;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fz_in in = {data, size};
    uint8_t opb = fz_u8(&in);
    int cpu = opb & 1, n_host = (opb >> 1) % (PLUS_MAX_SHAPEV + 1);
    g_node = fz_cstr(&in);
    g_plan = fz_cstr(&in);
    if (!g_plan[0]) free(g_plan), g_plan = NULL;   /* the node has no plus_plan */
    g_n_attr = fz_u8(&in) % 5;
    for (int k = 0; k < g_n_attr; k++) {
        char* a = fz_cstr(&in);
        snprintf(g_attr[k].arch, sizeof g_attr[k].arch, "%s", a);
        free(a);
        uint8_t t = fz_u8(&in);
        g_attr[k].dtype = t < 0xF0 ? ORT_TENSOR_UINT8 : t % 28;
        g_attr[k].data = fz_blob(&in, (size_t)fz_bytes_le(&in, 2), &g_attr[k].size);
    }
    g_n_in = fz_u8(&in) % (PLUS_MAX_IN + 2);
    int real = 1;
    for (size_t i = 0; i < g_n_in; i++) real &= make_input(&in, &g_in[i]);
    uint8_t ot = fz_u8(&in);
    g_out_dtype = ot < 0xE0 ? 0 : ot % 28;
    g_set_cc(ot & 1 ? 80 : 90);
    plus_plan pl;   /* what the graph says of the outputs: the plan's types and count, or one more */
    char perr[PLUS_ERR_LEN];
    memset(g_plan_out, 0, sizeof g_plan_out);
    g_n_out = 1;
    if (g_plan && !plus_plan_parse(g_plan, &pl, perr, sizeof perr)) {
        for (int o = 0; o < pl.n_out; o++) g_plan_out[o] = pl.out[o].dtype;
        g_n_out = pl.n_out + (ot == 0xDF);
        plus_plan_free(&pl);
    }
    uint8_t wb = fz_u8(&in);
    g_out_unwired = wb & 1 ? (wb >> 1) % g_n_out : -1;
    g_out_null = (wb & 0x20) != 0;

    const OrtCustomOp* op = NULL;
    for (int k = 0; k < g_n_ops; k++)
        if ((g_ops[k]->GetExecutionProviderType(g_ops[k]) == NULL) == cpu &&
            g_ops[k]->GetInputTypeCount(g_ops[k]) == (size_t)n_host + 1)
            op = g_ops[k];
    if (!op) abort();
    const OrtApi* api = get_api(18);
    /* shape inference on the same plan (before and independent of any kernel) */
    OrtStatus* st = op->InferOutputShapeFn(op, (OrtShapeInferContext*)&g_n_ops);
    if (st) f_ReleaseStatus(st);
    void* kernel = NULL;
    st = op->CreateKernelV2(op, api, (const OrtKernelInfo*)&g_n_ops, &kernel);
    if (st) {
        if (kernel || !memchr(st->msg, 0, sizeof st->msg)) abort();
        f_ReleaseStatus(st);
    } else {
        if (real) {
            st = op->KernelComputeV2(kernel, NULL);
            if (st) f_ReleaseStatus(st);
        }
        op->KernelDestroy(kernel);
    }
    if (g_live_values || g_scratch || g_live()) abort();   /* nothing leaked across the ORT boundary */
    for (size_t i = 0; i < g_n_in; i++) free(g_in[i].data);
    for (int o = 0; o < PLUS_MAX_OUT; o++) free(g_out[o].data), g_out[o].data = NULL;
    for (int k = 0; k < g_n_attr; k++) free(g_attr[k].data);
    free(g_node);
    free(g_plan);
    return 0;
}
