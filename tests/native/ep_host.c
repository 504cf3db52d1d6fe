/* A C host for the PlusEP plugin EP (no Python): what a server does.
 *
 *   ep_host ORT_LIBRARY PLUS_EP_LIBRARY MODEL N [KEY=VALUE]...
 *
 * dlopens ONNX Runtime's C library (libonnxruntime.so.*), gets OrtGetApiBase, registers PlusEP with
 * RegisterExecutionProviderLibrary, picks the PlusEP devices from GetEpDevices, appends them with
 * SessionOptionsAppendExecutionProvider_V2 (KEY=VALUE: provider options), creates a session on MODEL
 * (inputs X, Y: float32[N]; output Z) and runs it with X = 0..N-1, Y = 2. Prints the EP devices'
 * mode, then "Z: v0 v1 ...", or "error: <ORT's message>" (exit 1). The OrtApi slots are declared here
 * from shared/reference/ort-c-abi.md, like the library's own (no ORT header). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct OrtApi OrtApi;
typedef struct OrtStatus OrtStatus;
typedef struct OrtEnv OrtEnv;
typedef struct OrtSession OrtSession;
typedef struct OrtSessionOptions OrtSessionOptions;
typedef struct OrtEpDevice OrtEpDevice;
typedef struct OrtKeyValuePairs OrtKeyValuePairs;
typedef struct OrtMemoryInfo OrtMemoryInfo;
typedef struct OrtValue OrtValue;
typedef struct { const OrtApi* (*GetApi)(uint32_t); const char* (*GetVersionString)(void); } OrtApiBase;

typedef void (*fnptr)(void);
#define SLOT(n) (((const fnptr*)(const void*)api)[n])
static const OrtApi* api;

#define F(name, slot, ret, ...) typedef ret (*name##_t)(__VA_ARGS__); static name##_t name##_(void) { return (name##_t)SLOT(slot); }
F(GetErrorMessage, 2, const char*, const OrtStatus*)
F(CreateEnv, 3, OrtStatus*, int, const char*, OrtEnv**)
F(CreateSession, 7, OrtStatus*, const OrtEnv*, const char*, const OrtSessionOptions*, OrtSession**)
F(Run, 9, OrtStatus*, OrtSession*, const void*, const char* const*, const OrtValue* const*, size_t, const char* const*,
  size_t, OrtValue**)
F(CreateSessionOptions, 10, OrtStatus*, OrtSessionOptions**)
F(CreateTensorWithDataAsOrtValue, 49, OrtStatus*, const OrtMemoryInfo*, void*, size_t, const int64_t*, size_t, int,
  OrtValue**)
F(GetTensorMutableData, 51, OrtStatus*, OrtValue*, void**)
F(CreateCpuMemoryInfo, 69, OrtStatus*, int, int, OrtMemoryInfo**)
F(ReleaseEnv, 92, void, OrtEnv*)
F(ReleaseStatus, 93, void, OrtStatus*)
F(ReleaseMemoryInfo, 94, void, OrtMemoryInfo*)
F(ReleaseSession, 95, void, OrtSession*)
F(ReleaseValue, 96, void, OrtValue*)
F(ReleaseSessionOptions, 100, void, OrtSessionOptions*)
F(GetKeyValue, 297, const char*, const OrtKeyValuePairs*, const char*)
F(RegisterExecutionProviderLibrary, 301, OrtStatus*, OrtEnv*, const char*, const char*)
F(UnregisterExecutionProviderLibrary, 302, OrtStatus*, OrtEnv*, const char*)
F(GetEpDevices, 303, OrtStatus*, const OrtEnv*, const OrtEpDevice* const**, size_t*)
F(SessionOptionsAppendExecutionProvider_V2, 304, OrtStatus*, OrtSessionOptions*, OrtEnv*, const OrtEpDevice* const*,
  size_t, const char* const*, const char* const*, size_t)
F(EpDevice_EpName, 312, const char*, const OrtEpDevice*)
F(EpDevice_EpMetadata, 314, const OrtKeyValuePairs*, const OrtEpDevice*)
#undef F
#define CALL(name) name##_()

static void check(OrtStatus* st, const char* what) {
    if (!st) return;
    printf("error: %s: %s\n", what, CALL(GetErrorMessage)(st));
    CALL(ReleaseStatus)(st);
    exit(1);
}

int main(int argc, char** argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s ORT_LIBRARY PLUS_EP_LIBRARY MODEL N [KEY=VALUE]...\n", argv[0]);
        return 2;
    }
    void* ort = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!ort) return fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror()), 2;
    const OrtApiBase* (*get_base)(void) = (const OrtApiBase* (*)(void))dlsym(ort, "OrtGetApiBase");
    if (!get_base) return fprintf(stderr, "no OrtGetApiBase in %s\n", argv[1]), 2;
    const OrtApiBase* base = get_base();
    api = base->GetApi(25);   /* every slot used here exists from API 23; PlusEP needs ORT >= 1.25 */
    if (!api) return fprintf(stderr, "ONNX Runtime %s lacks C API 25\n", base->GetVersionString()), 2;
    printf("ONNX Runtime %s\n", base->GetVersionString());

    OrtEnv* env = NULL;
    check(CALL(CreateEnv)(2 /* WARNING */, "ep_host", &env), "CreateEnv");
    check(CALL(RegisterExecutionProviderLibrary)(env, "PlusEP", argv[2]), "RegisterExecutionProviderLibrary");
    const OrtEpDevice* const* all = NULL;
    size_t n_all = 0;
    check(CALL(GetEpDevices)(env, &all, &n_all), "GetEpDevices");
    const OrtEpDevice* mine[16];
    size_t n_mine = 0;
    for (size_t i = 0; i < n_all && n_mine < 16; i++)
        if (!strcmp(CALL(EpDevice_EpName)(all[i]), "PlusEP")) {
            const OrtKeyValuePairs* m = CALL(EpDevice_EpMetadata)(all[i]);
            const char* mode = m ? CALL(GetKeyValue)(m, "plus_ep.mode") : NULL;
            printf("PlusEP device %zu: mode %s\n", n_mine, mode ? mode : "?");
            mine[n_mine++] = all[i];
        }
    if (!n_mine) {
        printf("error: no PlusEP device\n");
        CALL(ReleaseEnv)(env);
        return 1;
    }

    const char* keys[16];
    const char* values[16];
    size_t n_opts = 0;
    for (int a = 5; a < argc && n_opts < 16; a++) {
        char* eq = strchr(argv[a], '=');
        if (!eq) continue;
        *eq = 0;
        keys[n_opts] = argv[a];
        values[n_opts++] = eq + 1;
    }
    OrtSessionOptions* so = NULL;
    check(CALL(CreateSessionOptions)(&so), "CreateSessionOptions");
    check(CALL(SessionOptionsAppendExecutionProvider_V2)(so, env, mine, 1, keys, values, n_opts),
          "SessionOptionsAppendExecutionProvider_V2");
    OrtSession* sess = NULL;
    check(CALL(CreateSession)(env, argv[3], so, &sess), "CreateSession");

    int64_t n = atoll(argv[4]);
    float* x = malloc((size_t)n * sizeof *x);
    float* y = malloc((size_t)n * sizeof *y);
    for (int64_t i = 0; i < n; i++) x[i] = (float)i, y[i] = 2.0f;
    OrtMemoryInfo* cpu = NULL;
    check(CALL(CreateCpuMemoryInfo)(0 /* OrtDeviceAllocator */, 0 /* default */, &cpu), "CreateCpuMemoryInfo");
    OrtValue* in[2] = {NULL, NULL};
    check(CALL(CreateTensorWithDataAsOrtValue)(cpu, x, (size_t)n * 4, &n, 1, 1 /* float */, &in[0]), "X");
    check(CALL(CreateTensorWithDataAsOrtValue)(cpu, y, (size_t)n * 4, &n, 1, 1, &in[1]), "Y");
    const char* in_names[] = {"X", "Y"};
    const char* out_names[] = {"Z"};
    OrtValue* out = NULL;
    check(CALL(Run)(sess, NULL, in_names, (const OrtValue* const*)in, 2, out_names, 1, &out), "Run");
    float* z = NULL;
    check(CALL(GetTensorMutableData)(out, (void**)&z), "GetTensorMutableData");
    printf("Z:");
    for (int64_t i = 0; i < n; i++) printf(" %g", z[i]);
    printf("\n");

    CALL(ReleaseValue)(out);
    CALL(ReleaseValue)(in[0]);
    CALL(ReleaseValue)(in[1]);
    CALL(ReleaseMemoryInfo)(cpu);
    CALL(ReleaseSession)(sess);
    CALL(ReleaseSessionOptions)(so);
    check(CALL(UnregisterExecutionProviderLibrary)(env, "PlusEP"), "UnregisterExecutionProviderLibrary");
    CALL(ReleaseEnv)(env);
    free(x);
    free(y);
    return 0;
}
