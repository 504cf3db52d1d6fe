/* Drives the custom op of plus_ep/native/ort_op.c the way ONNX Runtime's CUDA execution provider
 * would (tests only; no ORT library, no GPU): RegisterCustomOps hands this program's stand-in OrtApi
 * the ops, and it runs one op's CUDA or CPU twin through CreateKernelV2 and KernelComputeV2 with
 * inputs in "device" memory of the stand-in driver (tests/native/fake_cuda.c, host memory) and the
 * driver's stream. Used by tests/native/test_cpu_resident_shapes.py.
 *
 *   ortop_host describe                        every registered op: name, EP, input memory types
 *   ortop_host run OP cuda|cpu PLAN ARCH=PACK RUNS SPEC...
 *       SPEC: DTYPE:DIMS=v1,v2,... (ONNX element type, dims "2x3", the values), or `absent`: the node
 *       wires "" there (its name is "" and ORT hands over no tensor)
 *       ORTOP_OUTPUT=absent: the node wires output 0 "" (and ORT hands over no tensor for it);
 *       ORTOP_OUTPUT=null: output 0 has a name, but KernelContext_GetOutput hands over no tensor
 *       prints each log message, the first output ("out: ..."), then the driver's counters:
 *       "counts: sync=S dtoh=D launch=L" for the RUNS runs (create excluded).
 * The API table holds only the slots ort_op.c calls (declared in plus_ep/native/ort_abi.h); any other
 * slot is NULL, so a call to one crashes the test instead of passing silently. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ort_abi.h"
#include "host_util.h"


OrtStatus* RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base);

struct OrtStatus { int code; char msg[2048]; };
typedef struct { int dtype; size_t rank; int64_t dims[8]; void* data; size_t count; int owned, absent; } value;
#include "ort_standin.h"   /* statuses and tensor reads over `value` */

static const OrtCustomOp* g_ops[64];
static int g_n_ops;
static const char* g_plan;
static const char* g_arch;
static void* g_pack;
static size_t g_pack_size;
static value g_in[16];
static size_t g_n_in;
static value g_out[8];
static void* g_stream;

static OrtStatus* f_CreateCustomOpDomain(const char* name, OrtCustomOpDomain** out) {
    CHECK(!strcmp(name, "ai.plus_ep"), "domain %s", name);
    *out = (OrtCustomOpDomain*)&g_n_ops;
    return NULL;
}
static OrtStatus* f_CustomOpDomain_Add(OrtCustomOpDomain* d, const OrtCustomOp* op) {
    (void)d;
    CHECK(g_n_ops < 64, "too many ops");
    g_ops[g_n_ops++] = op;
    return NULL;
}
static OrtStatus* f_AddCustomOpDomain(OrtSessionOptions* o, OrtCustomOpDomain* d) { (void)o, (void)d; return NULL; }

/* size-query convention: out NULL -> *n = bytes needed (with the NUL) */
static OrtStatus* copy_str(const char* s, char* out, size_t* n) {
    size_t need = strlen(s) + 1;
    if (out) {
        CHECK(*n >= need, "short buffer");
        memcpy(out, s, need);
    }
    *n = need;
    return NULL;
}
static OrtStatus* f_KernelInfoGetAttribute_string(const OrtKernelInfo* i, const char* name, char* out, size_t* n) {
    (void)i;
    if (strcmp(name, "plus_plan")) return status(ORT_FAIL, "no such attribute");
    return copy_str(g_plan, out, n);
}
static OrtStatus* f_KernelInfoGetAttribute_tensor(const OrtKernelInfo* i, const char* name, OrtAllocator* a,
                                                  OrtValue** out) {
    (void)i, (void)a;
    char want[64];
    snprintf(want, sizeof want, "plus_images_%s", g_arch);
    if (strcmp(name, want)) return status(ORT_FAIL, "no such attribute");
    value* v = calloc(1, sizeof *v);
    v->dtype = ORT_TENSOR_UINT8, v->rank = 1, v->dims[0] = (int64_t)g_pack_size, v->count = g_pack_size;
    v->data = g_pack;
    *out = (OrtValue*)v;
    return NULL;
}
static void f_ReleaseValue(OrtValue* v) { free(v); }
static OrtStatus* f_KernelInfo_GetInputCount(const OrtKernelInfo* i, size_t* n) { (void)i; *n = g_n_in; return NULL; }
static OrtStatus* f_KernelInfo_GetInputName(const OrtKernelInfo* i, size_t k, char* out, size_t* n) {
    (void)i;
    char name[32] = "";
    if (k < g_n_in && !g_in[k].absent) snprintf(name, sizeof name, "in%zu", k);
    return copy_str(name, out, n);
}
static const char* output_mode(void) { return getenv("ORTOP_OUTPUT") ? getenv("ORTOP_OUTPUT") : ""; }
static OrtStatus* f_KernelInfo_GetOutputCount(const OrtKernelInfo* i, size_t* n) { (void)i; *n = 1; return NULL; }
static OrtStatus* f_KernelInfo_GetOutputName(const OrtKernelInfo* i, size_t k, char* out, size_t* n) {
    (void)i;
    return copy_str(k == 0 && !strcmp(output_mode(), "absent") ? "" : "y", out, n);
}
static OrtStatus* f_KernelInfo_GetNodeName(const OrtKernelInfo* i, char* out, size_t* n) {
    (void)i;
    return copy_str("plus_ep/test/0", out, n);
}
static OrtStatus* f_KernelInfo_GetLogger(const OrtKernelInfo* i, const OrtLogger** out) {
    (void)i;
    *out = (const OrtLogger*)&g_n_ops;
    return NULL;
}
static OrtStatus* f_Logger_LogMessage(const OrtLogger* l, int level, const char* msg, const char* file, int line,
                                      const char* fn) {
    (void)l, (void)file, (void)line, (void)fn;
    printf("log %d: %s\n", level, msg);
    return NULL;
}
static OrtAllocator g_alloc;
static OrtStatus* f_GetAllocatorWithDefaultOptions(OrtAllocator** out) { *out = &g_alloc; return NULL; }
static OrtStatus* f_GetDimensions(const OrtTensorTypeAndShapeInfo* t, int64_t* out, size_t n) {
    memcpy(out, ((const value*)t)->dims, n * sizeof *out);
    return NULL;
}
static OrtStatus* f_KernelContext_GetInputCount(const OrtKernelContext* c, size_t* n) { (void)c; *n = g_n_in; return NULL; }
static OrtStatus* f_KernelContext_GetOutputCount(const OrtKernelContext* c, size_t* n) { (void)c; *n = 1; return NULL; }
static OrtStatus* f_KernelContext_GetInput(const OrtKernelContext* c, size_t i, const OrtValue** out) {
    (void)c;
    *out = i < g_n_in && !g_in[i].absent ? (const OrtValue*)&g_in[i] : NULL;
    return NULL;
}
static size_t elsize(int dtype) { return dtype == 7 || dtype == 11 ? 8 : dtype == 2 || dtype == 3 || dtype == 9 ? 1 : 4; }
static OrtStatus* f_KernelContext_GetOutput(OrtKernelContext* c, size_t i, const int64_t* dims, size_t rank,
                                            OrtValue** out) {
    (void)c;
    CHECK(i == 0 && rank <= 8, "output %zu rank %zu", i, rank);
    if (output_mode()[0]) {   /* absent or null: ORT hands over no tensor */
        *out = NULL;
        return NULL;
    }
    value* v = &g_out[0];
    free(v->data);
    v->dtype = 1, v->rank = rank, v->count = 1;
    for (size_t d = 0; d < rank; d++) v->dims[d] = dims[d], v->count *= (size_t)dims[d];
    v->data = calloc(v->count ? v->count : 1, 4);
    *out = (OrtValue*)v;
    return NULL;
}
static OrtStatus* f_KernelContext_GetGPUComputeStream(const OrtKernelContext* c, void** out) {
    (void)c;
    *out = g_stream;
    return NULL;
}

static ort_fnptr g_table[300];
static const OrtApi* get_api(uint32_t version) { (void)version; return (const OrtApi*)(const void*)g_table; }
static const char* get_version(void) { return "fake"; }

static void fill_table(void) {
    ort_standin_fill(g_table);
#define SET(name) ORT_STANDIN_SET(g_table, name)
    SET(CreateCustomOpDomain); SET(CustomOpDomain_Add); SET(AddCustomOpDomain); SET(KernelInfoGetAttribute_string);
    SET(KernelInfoGetAttribute_tensor); SET(ReleaseValue); SET(KernelInfo_GetInputCount); SET(KernelInfo_GetInputName);
    SET(KernelInfo_GetNodeName); SET(KernelInfo_GetLogger); SET(Logger_LogMessage); SET(GetAllocatorWithDefaultOptions);
    SET(GetDimensions); SET(KernelContext_GetInputCount); SET(KernelContext_GetOutputCount); SET(KernelContext_GetInput);
    SET(KernelContext_GetOutput); SET(KernelContext_GetGPUComputeStream); SET(KernelInfo_GetOutputCount);
    SET(KernelInfo_GetOutputName);
#undef SET
}

static void parse_spec(const char* spec, value* v) {
    char* end;
    memset(v, 0, sizeof *v);
    if (!strcmp(spec, "absent")) {
        v->absent = 1;
        return;
    }
    v->dtype = (int)strtol(spec, &end, 10);
    CHECK(*end == ':', "bad spec %s", spec);
    v->count = 1;
    for (end++; *end && *end != '=';) {
        v->dims[v->rank] = strtoll(end, &end, 10);
        v->count *= (size_t)v->dims[v->rank++];
        if (*end == 'x') end++;
    }
    v->data = calloc(v->count ? v->count : 1, elsize(v->dtype));
    v->owned = 1;
    for (size_t i = 0; i < v->count && *end && *++end;) {
        double x = strtod(end, &end);
        if (v->dtype == 7) ((int64_t*)v->data)[i++] = (int64_t)x;
        else if (v->dtype == 6) ((int32_t*)v->data)[i++] = (int32_t)x;
        else ((float*)v->data)[i++] = (float)x;
        if (*end != ',') break;
    }
}

static const char* mem_name(int m) { return m == ORT_MEM_CPU_INPUT ? "cpu_input" : m == ORT_MEM_DEFAULT ? "default" : "?"; }

int main(int argc, char** argv) {
    CHECK(argc >= 2, "usage: ortop_host describe | run OP cuda|cpu PLAN ARCH=PACK RUNS SPEC...");
    fill_table();
    OrtApiBase base = {get_api, get_version};
    OrtStatus* st = RegisterCustomOps(NULL, &base);
    CHECK(!st, "RegisterCustomOps: %s", st ? st->msg : "");
    if (!strcmp(argv[1], "describe")) {
        for (int k = 0; k < g_n_ops; k++) {
            const OrtCustomOp* op = g_ops[k];
            const char* ep = op->GetExecutionProviderType(op);
            size_t n = op->GetInputTypeCount(op);
            printf("%s %s inputs=%zu", op->GetName(op), ep ? ep : "CPU", n);
            for (size_t i = 0; i < n; i++)
                printf(" %s/%s", op->GetInputCharacteristic(op, i) == ORT_CHAR_VARIADIC ? "variadic" : "required",
                       mem_name(op->GetInputMemoryType(op, i)));
            printf("\n");
        }
        return 0;
    }
    CHECK(!strcmp(argv[1], "run") && argc >= 7, "bad arguments");
    const OrtCustomOp* op = NULL;
    int cuda = !strcmp(argv[3], "cuda");
    for (int k = 0; k < g_n_ops; k++)
        if (!strcmp(g_ops[k]->GetName(g_ops[k]), argv[2]) && (g_ops[k]->GetExecutionProviderType(g_ops[k]) != NULL) == cuda)
            op = g_ops[k];
    CHECK(op, "no op %s for %s", argv[2], argv[3]);
    g_plan = slurp(argv[4], NULL);
    char* eq = strchr(argv[5], '=');
    CHECK(eq, "ARCH=PACK");
    *eq = 0;
    g_arch = argv[5];
    g_pack = slurp(eq + 1, &g_pack_size);
    int runs = atoi(argv[6]);
    for (int i = 7; i < argc && g_n_in < 16; i++) parse_spec(argv[i], &g_in[g_n_in++]);

    /* the stand-in driver the launcher loaded ($PLUS_EP_CUDA_LIBRARY): its stream and counters */
    void* drv = dlopen(getenv("PLUS_EP_CUDA_LIBRARY"), RTLD_NOW | RTLD_NOLOAD);
    CHECK(drv, "the driver is not loaded");
    void* (*stream_of)(int) = (void* (*)(int))dlsym(drv, "fake_cuda_stream");
    long (*count)(const char*) = (long (*)(const char*))dlsym(drv, "fake_cuda_count");
    CHECK(stream_of && count, "not the stand-in driver");
    g_stream = cuda ? stream_of(0) : NULL;

    void* kernel = NULL;
    if ((st = op->CreateKernelV2(op, (const OrtApi*)(const void*)g_table, NULL, &kernel))) {
        printf("error: %s\n", st->msg);
        free(st);
        return 1;
    }
    long s0 = count("sync"), d0 = count("dtoh"), l0 = count("launch");
    int rc = 0;
    for (int r = 0; r < runs && !rc; r++)
        if ((st = op->KernelComputeV2(kernel, NULL))) {
            printf("error: %s\n", st->msg);
            free(st);
            rc = 1;
        }
    if (!rc) {
        printf("out:");
        for (size_t i = 0; i < g_out[0].count && g_out[0].data; i++) printf(" %g", ((float*)g_out[0].data)[i]);
        printf("\n");
    }
    printf("counts: sync=%ld dtoh=%ld launch=%ld\n", count("sync") - s0, count("dtoh") - d0, count("launch") - l0);
    op->KernelDestroy(kernel);
    for (size_t i = 0; i < g_n_in; i++) free(g_in[i].data);
    free(g_out[0].data);
    free((void*)g_plan);
    free(g_pack);
    dlclose(drv);
    return rc;
}
