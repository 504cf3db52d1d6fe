/* The plugin-EP entry points (CreateEpFactories / ReleaseEpFactory), the "PlusEP" factory, its devices
 * and the provider options. See ep.h for the three device modes and shared/reference/ort-plugin-ep.md
 * for the facts this follows (version negotiation §2.1, devices and memory §2.7, options §1.2). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ep.h"

#define EXPORT __attribute__((visibility("default")))

/* ---- provider options ---- */

static const char* const OPTION_NAMES = "arch, cache_dir, cuda_graph, cuda_graph_warmup, disable, fp32_math, kernel_times, trust, verify";
/* The archs PlusEP builds kernels for (kernels/arch.py ARCHS; tests/cpu/test_options.py ties the two). */
static const char* const ARCH_NAMES[] = {"sm_80", "sm_86", "sm_89", "sm_90", "sm_90a"};

/* plus_ep/options.py's check, installed by `import plus_ep` (plus_ep/ep.py): the options as a JSON object;
 * returns nonzero and writes the one-line reason into err when one is bad. Without Python (a C host) the
 * checks below are all there is; with it, this one also knows the warehouse's pattern names. */
typedef int (*plus_ep_option_check_fn)(const char* options_json, char* err, size_t err_len);
static _Atomic(plus_ep_option_check_fn) g_option_check;
EXPORT void PlusEP_SetOptionCheck(plus_ep_option_check_fn fn) { atomic_store(&g_option_check, fn); }

/* Append "key": "value" to a JSON object being built in out (escaped; control characters as \u00XX). */
static void json_pair(char* out, size_t n, const char* key, const char* value) {
    size_t len = strlen(out);
    len += (size_t)snprintf(out + len, len < n ? n - len : 0, "%s\"%s\": \"", len > 1 ? ", " : "", key);
    for (const unsigned char* p = (const unsigned char*)value; *p && len + 8 < n; p++) {
        if (*p == '"' || *p == '\\') len += (size_t)snprintf(out + len, n - len, "\\%c", *p);
        else if (*p < 0x20) len += (size_t)snprintf(out + len, n - len, "\\u%04x", *p);
        else out[len++] = (char)*p, out[len] = 0;
    }
    if (len + 2 < n) snprintf(out + len, n - len, "\"");
}

static OrtStatus* set_option(plus_ep_options* o, const char* name, const char* value) {
    struct { const char* name; char* buf; size_t n; } text[] = {
        {"arch", o->arch, sizeof o->arch}, {"cache_dir", o->cache_dir, sizeof o->cache_dir},
        {"disable", o->disable, sizeof o->disable}, {"fp32_math", o->fp32_math, sizeof o->fp32_math},
        {"trust", o->trust, sizeof o->trust},
    };
    for (size_t i = 0; i < sizeof text / sizeof *text; i++) {
        if (strcmp(name, text[i].name)) continue;
        if (strlen(value) >= text[i].n)
            return plus_ep_status(ORT_INVALID_ARGUMENT, "PlusEP provider option '%s' is too long (%zu bytes)", name,
                                  strlen(value));
        snprintf(text[i].buf, text[i].n, "%s", value);
        if (!strcmp(name, "fp32_math") && strcmp(value, "exact") && strcmp(value, "tf32"))
            return plus_ep_status(ORT_INVALID_ARGUMENT, "PlusEP provider option fp32_math='%s': use 'exact' or 'tf32'",
                                  value);
        if (!strcmp(name, "arch") && *value) {
            size_t k = 0, n_arch = sizeof ARCH_NAMES / sizeof *ARCH_NAMES;
            while (k < n_arch && strcmp(value, ARCH_NAMES[k])) k++;
            if (k == n_arch) {
                char use[256] = "";
                for (k = 0; k < n_arch; k++)
                    snprintf(use + strlen(use), sizeof use - strlen(use), "%s'%s'", k ? " or " : "", ARCH_NAMES[k]);
                return plus_ep_status(ORT_INVALID_ARGUMENT, "PlusEP provider option arch='%s': use %s", value, use);
            }
        }
        if (!strcmp(name, "trust") && strcmp(value, "any") && strcmp(value, "verify"))
            return plus_ep_status(ORT_INVALID_ARGUMENT, "PlusEP provider option trust='%s': use 'any' (run embedded "
                                  "kernels unverified) or 'verify' (the default)", value);
        return NULL;
    }
    if (!strcmp(name, "verify")) {
        if (!strcmp(value, "1") || !strcasecmp(value, "true")) o->verify = 1;
        else if (!strcmp(value, "0") || !strcasecmp(value, "false") || !*value) o->verify = 0;
        else return plus_ep_status(ORT_INVALID_ARGUMENT, "PlusEP provider option verify='%s': use '1' or '0'", value);
        return NULL;
    }
    /* The EP's own on/off options, read as verify (plus_ep/options.py FLAGS). */
    struct { const char* name; int* flag; } flags[] = {{"cuda_graph", &o->cuda_graph}, {"kernel_times", &o->kernel_times}};
    for (size_t i = 0; i < sizeof flags / sizeof *flags; i++) {
        if (strcmp(name, flags[i].name)) continue;
        if (!strcmp(value, "1") || !strcasecmp(value, "true")) *flags[i].flag = 1;
        else if (!strcmp(value, "0") || !strcasecmp(value, "false") || !*value) *flags[i].flag = 0;
        else return plus_ep_status(ORT_INVALID_ARGUMENT, "PlusEP provider option %s='%s': use '1' or '0'", name, value);
        return NULL;
    }
    if (!strcmp(name, "cuda_graph_warmup")) {
        char* end = NULL;
        long n = strtol(value, &end, 10);
        if (!*value || *end || n < 0 || n > 1000)
            return plus_ep_status(ORT_INVALID_ARGUMENT, "PlusEP provider option cuda_graph_warmup='%s': use a run count "
                                  "from 0 to 1000", value);
        o->cuda_graph_warmup = (int)n;
        return NULL;
    }
    /* device_id is ORT's own selector among the EP's devices (providers=[("PlusEP", {"device_id": "1"})]). */
    if (!strcmp(name, "device_id")) return NULL;
    return plus_ep_status(ORT_INVALID_ARGUMENT, "unknown PlusEP provider option '%s' (session config entry ep.plusep.%s); "
                          "known options: %s", name, name, OPTION_NAMES);
}

OrtStatus* plus_ep_read_options(const OrtSessionOptions* so, plus_ep_options* o) {
    memset(o, 0, sizeof *o);
    o->cuda_graph_warmup = 1;
    /* fp32_math stays "" unless set: the planner then applies PlusEP's default (tf32, as the CUDA EP's
     * use_tf32; plus_ep/options.py). Rewritten models carry their kernels already. */
    if (!so) return NULL;
    OrtKeyValuePairs* kv = NULL;
    OrtStatus* st = ORT_CALL(plus_ep_api, GetSessionOptionsConfigEntries)(so, &kv);
    if (st) return st;
    const char* const* keys = NULL;
    const char* const* values = NULL;
    size_t n = 0;
    if (kv) ORT_CALL(plus_ep_api, GetKeyValuePairs)(kv, &keys, &values, &n);
    static const char prefix[] = "ep.plusep.";
    char json[8192] = "{";
    for (size_t i = 0; i < n && !st; i++)
        if (keys[i] && !strncmp(keys[i], prefix, sizeof prefix - 1)) {
            st = set_option(o, keys[i] + sizeof prefix - 1, values[i] ? values[i] : "");
            json_pair(json, sizeof json - 2, keys[i] + sizeof prefix - 1, values[i] ? values[i] : "");
        }
    if (kv) ORT_CALL(plus_ep_api, ReleaseKeyValuePairs)(kv);
    plus_ep_option_check_fn check = atomic_load(&g_option_check);
    if (!st && check && json[1]) {           /* the Python owner's verdict on what C accepted */
        strcat(json, "}");
        char err[PLUS_ERR_LEN] = "";
        if (check(json, err, sizeof err))
            st = plus_ep_status(ORT_INVALID_ARGUMENT, "%s", err[0] ? err : "PlusEP: bad provider options");
    }
    return st;
}

/* ---- the factory ---- */

typedef struct {
    OrtEpFactory base;
    OrtMemoryInfo* mem[PLUS_EP_MAX_DEVICES];       /* per CUDA ordinal, created with its EP device */
    OrtHardwareDevice* virt[PLUS_EP_MAX_DEVICES];  /* devices we had to describe ourselves */
    int n_virt;
    const OrtLogger* logger;                       /* ORT's default logger (CreateEpFactories) */
} plus_factory;

static plus_factory g_factory;

const OrtMemoryInfo* plus_ep_memory_info(int ordinal) {
    return ordinal >= 0 && ordinal < PLUS_EP_MAX_DEVICES ? g_factory.mem[ordinal] : NULL;
}

static const char* f_name(const OrtEpFactory* f) { (void)f; return PLUS_EP_NAME; }
static const char* f_vendor(const OrtEpFactory* f) { (void)f; return "PlusEP"; }
static uint32_t f_vendor_id(const OrtEpFactory* f) { (void)f; return 0; }
static const char* f_version(const OrtEpFactory* f) { (void)f; return PLUS_EP_VERSION; }

static int env_on(const char* name) {
    const char* v = getenv(name);
    return v && *v && strcmp(v, "0");
}

/* PCI address of /sys/class/drm/card<idx> ("0000:3b:00.0"), or "" when it cannot be read. */
static void card_pci_address(const char* card_idx, char* buf, size_t n) {
    char path[PATH_MAX], real[PATH_MAX];
    buf[0] = 0;
    snprintf(path, sizeof path, "/sys/class/drm/card%s/device", card_idx);
    if (!realpath(path, real)) return;
    const char* base = strrchr(real, '/');
    snprintf(buf, n, "%.63s", base ? base + 1 : real);
    for (char* p = buf; *p; p++)
        if (*p >= 'A' && *p <= 'Z') *p = (char)(*p - 'A' + 'a');
}

/* The driver's device name and memory (cuDeviceGetName, cuDeviceTotalMem_v2: not in the launcher's
 * table, looked up in the same library); "" / 0 when the driver lacks them. */
static void device_facts(const plus_driver* d, int ordinal, char* name, size_t n, size_t* bytes) {
    static CUresult (*get_name)(char*, int, CUdevice);
    static CUresult (*total_mem)(size_t*, CUdevice);
    static atomic_int looked;
    name[0] = 0;
    *bytes = 0;
    if (!atomic_exchange(&looked, 1)) {
        const char* path = getenv("PLUS_EP_CUDA_LIBRARY");
        void* h = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);   /* one more reference */
        if (h) {
            *(void**)&get_name = dlsym(h, "cuDeviceGetName");
            *(void**)&total_mem = dlsym(h, "cuDeviceTotalMem_v2");
        }
    }
    CUdevice dev;
    if (!d || d->cuDeviceGet(&dev, ordinal)) return;
    if (get_name && get_name(name, (int)n, dev)) name[0] = 0;
    name[n - 1] = 0;
    if (total_mem && total_mem(bytes, dev)) *bytes = 0;
}

/* One EP device on `hw` (ORT's or one we described). Metadata (ORT adds "version", PlusEP's, and
 * "library_path"): plus_ep.mode, plus_ep.cuda_ordinal, plus_ep.device_name, plus_ep.compute_capability,
 * plus_ep.memory_bytes; plus_ep.reason for an inert device. Device memory (an allocator) only in gpu
 * mode: a staging or inert device leaves tensors in host memory. */
static OrtStatus* add_device(plus_factory* f, const OrtHardwareDevice* hw, int mode, int ordinal, const char* why,
                             OrtEpDevice** out) {
    const OrtApi* api = plus_ep_api;
    static const char* const MODES[] = {"gpu", "staging", "inert"};
    OrtKeyValuePairs* meta = NULL;
    char ord[16];
    snprintf(ord, sizeof ord, "%d", ordinal);
    ORT_CALL(api, CreateKeyValuePairs)(&meta);
    ORT_CALL(api, AddKeyValuePair)(meta, "plus_ep.mode", MODES[mode]);
    const plus_driver* d = plus_driver_get(NULL);
    if (d && ordinal < d->device_count) {
        CUdevice dev;
        int major = 0, minor = 0;
        char cc[16], name[256], mem[32];
        size_t bytes = 0;
        ORT_CALL(api, AddKeyValuePair)(meta, "plus_ep.cuda_ordinal", ord);
        if (!d->cuDeviceGet(&dev, ordinal) && !d->cuDeviceGetAttribute(&major, PLUS_CU_ATTR_CC_MAJOR, dev) &&
            !d->cuDeviceGetAttribute(&minor, PLUS_CU_ATTR_CC_MINOR, dev)) {
            snprintf(cc, sizeof cc, "%d.%d", major, minor);
            ORT_CALL(api, AddKeyValuePair)(meta, "plus_ep.compute_capability", cc);
        }
        device_facts(d, ordinal, name, sizeof name, &bytes);
        if (name[0]) ORT_CALL(api, AddKeyValuePair)(meta, "plus_ep.device_name", name);
        if (bytes) {
            snprintf(mem, sizeof mem, "%zu", bytes);
            ORT_CALL(api, AddKeyValuePair)(meta, "plus_ep.memory_bytes", mem);
        }
    }
    if (why && *why) ORT_CALL(api, AddKeyValuePair)(meta, "plus_ep.reason", why);
    OrtStatus* st = EP_CALL(plus_ep_epapi, CreateEpDevice)(&f->base, hw, meta, NULL, out);
    ORT_CALL(api, ReleaseKeyValuePairs)(meta);
    if (st || mode != PLUS_MODE_GPU) return st;
    /* The CUDA EP's device: (GPU, NVIDIA, ordinal, default memory, no alignment), so ORT puts no copies
     * between PlusEP and CUDA EP nodes (ort-plugin-ep.md §3). */
    if (!f->mem[ordinal])
        st = ORT_CALL(api, CreateMemoryInfo_V2)("Cuda", ORT_MEMDEV_GPU, PLUS_NVIDIA_VENDOR_ID, ordinal,
                                                ORT_DEVMEM_DEFAULT, 0, ORT_DEVICE_ALLOCATOR, &f->mem[ordinal]);
    if (!st) st = EP_CALL(plus_ep_epapi, EpDevice_AddAllocatorInfo)(*out, f->mem[ordinal]);
    return st;
}

/* A GPU-typed hardware device PlusEP describes itself (the driver has devices ORT did not discover). */
static OrtStatus* virtual_gpu(plus_factory* f, int ordinal, OrtHardwareDevice** out) {
    *out = NULL;
    if (f->n_virt >= PLUS_EP_MAX_DEVICES) return plus_ep_status(ORT_FAIL, "PlusEP: too many devices");
    OrtStatus* st = EP_CALL(plus_ep_epapi, CreateHardwareDevice)(ORT_HW_GPU, PLUS_NVIDIA_VENDOR_ID, (uint32_t)ordinal,
                                                                 "NVIDIA", NULL, out);
    if (!st) f->virt[f->n_virt++] = *out;
    return st;
}

/* The one line a process gets when PlusEP offers no device (through ORT's default logger, so every ORT
 * client shows it at its log severity: Python, onnxruntime-genai, C hosts). */
static char g_no_device[512];   /* why the last device query found none ("" = it found some) */

/* The reason PlusEP offers no device in this process, "" when it offers some (plus_ep/ep.py). */
EXPORT const char* PlusEP_NoDeviceReason(void) { return g_no_device; }

/* `import plus_ep` registers the library in every Python process, the CLI's included: there the line is
 * INFO (its reason stays available: PlusEP_NoDeviceReason); a registration by anyone else (onnxruntime-genai,
 * a C host, a second registration) gives the WARNING, once per process. */
static atomic_int g_quiet;
EXPORT void PlusEP_SetQuietRegistration(int quiet) { atomic_store(&g_quiet, quiet); }

static void warn_no_device(plus_factory* f, const char* why) {
    static atomic_int warned;
    snprintf(g_no_device, sizeof g_no_device, "no usable NVIDIA GPU (%s)", why && *why ? why : "unknown reason");
    const char* reason = why && *why ? why : "unknown reason";
    if (atomic_load(&g_quiet))
        plus_ep_log(f->logger, ORT_LOG_INFO, "PlusEP: no usable NVIDIA GPU (%s); PlusEP offers no device, so sessions "
                    "that list it run on their other execution providers", reason);
    else
        plus_ep_log_once(f->logger, ORT_LOG_WARNING, &warned, "PlusEP: no usable NVIDIA GPU (%s); PlusEP offers no "
                         "device, so sessions that list it run on their other execution providers", reason);
}

static OrtStatus* f_devices(OrtEpFactory* base, const OrtHardwareDevice* const* hw, size_t n_hw, OrtEpDevice** out,
                            size_t max, size_t* n_out) {
    plus_factory* f = (plus_factory*)base;
    const OrtApi* api = plus_ep_api;
    OrtStatus* st = NULL;
    *n_out = 0;
    g_no_device[0] = 0;
    const char* why = NULL;
    const plus_driver* d = NULL;
    int disabled = env_on("PLUS_EP_DISABLE");
    if (disabled) why = "PLUS_EP_DISABLE is set";
    else d = plus_driver_get(&why);
    int n_cuda = d ? d->device_count : 0;
    if (n_cuda > PLUS_EP_MAX_DEVICES) n_cuda = PLUS_EP_MAX_DEVICES;
    /* CUDA ordinals by PCI address, to match ORT's devices (Linux: /sys/class/drm/card<card_idx>). */
    char pci[PLUS_EP_MAX_DEVICES][32];
    int used[PLUS_EP_MAX_DEVICES] = {0};
    for (int o = 0; o < n_cuda; o++) plus_ep_pci_bus_id(d, o, pci[o], sizeof pci[o]);
    const OrtHardwareDevice* nv[PLUS_EP_MAX_DEVICES];
    int nv_ord[PLUS_EP_MAX_DEVICES], n_nv = 0;
    for (size_t i = 0; i < n_hw && n_nv < PLUS_EP_MAX_DEVICES; i++) {
        if (ORT_CALL(api, HardwareDevice_Type)(hw[i]) != ORT_HW_GPU ||
            ORT_CALL(api, HardwareDevice_VendorId)(hw[i]) != PLUS_NVIDIA_VENDOR_ID)
            continue;
        nv_ord[n_nv] = -1;
        const OrtKeyValuePairs* m = ORT_CALL(api, HardwareDevice_Metadata)(hw[i]);
        const char* card = m ? ORT_CALL(api, GetKeyValue)(m, "card_idx") : NULL;
        char addr[64] = "";
        if (card) card_pci_address(card, addr, sizeof addr);
        for (int o = 0; o < n_cuda && addr[0]; o++)
            if (!used[o] && pci[o][0] && !strcmp(pci[o], addr)) nv_ord[n_nv] = o, used[o] = 1;
        nv[n_nv++] = hw[i];
    }
    for (int i = 0; i < n_nv; i++)   /* no PCI match: the next free ordinal, in ORT's order */
        for (int o = 0; o < n_cuda && nv_ord[i] < 0; o++)
            if (!used[o]) nv_ord[i] = o, used[o] = 1;
    for (int i = 0; i < n_nv && *n_out < max && !st; i++)
        if (nv_ord[i] >= 0 && !(st = add_device(f, nv[i], PLUS_MODE_GPU, nv_ord[i], NULL, &out[*n_out]))) ++*n_out;
    if (st) return st;
    if (disabled) {
        /* PLUS_EP_DISABLE with NVIDIA GPUs: inert GPU devices keep the name "PlusEP" valid (claiming nothing),
         * so providers=["PlusEP", "CUDAExecutionProvider", ...] keeps the CUDA EP. */
        for (int i = 0; i < n_nv && *n_out < max && !st; i++)
            if (!(st = add_device(f, nv[i], PLUS_MODE_INERT, 0, why, &out[*n_out]))) ++*n_out;
        if (!*n_out) warn_no_device(f, why);
        return st;
    }

    /* ORT found no NVIDIA GPU. With the system driver (libcuda.so.1) and devices, ORT's discovery missed
     * them (it reads /sys/class/drm, which needs nvidia-drm): describe them ourselves. The same on request
     * (PLUS_EP_VIRTUAL_GPU=1, tests of the GPU path with a stand-in driver). Otherwise a driver named by
     * PLUS_EP_CUDA_LIBRARY (the emulated driver, the stand-in) runs through host staging: a GPU-typed
     * device without device memory. Never a CPU-typed device: ORT's PREFER_CPU/DEFAULT policies must not
     * pick PlusEP. */
    const char* lib = getenv("PLUS_EP_CUDA_LIBRARY");
    int system_driver = !lib || !*lib;
    if (!*n_out && n_nv == 0 && n_cuda > 0) {
        int mode = env_on("PLUS_EP_VIRTUAL_GPU") || system_driver ? PLUS_MODE_GPU : PLUS_MODE_STAGING;
        int count = mode == PLUS_MODE_GPU ? n_cuda : 1;   /* staging runs on CUDA device 0 */
        for (int o = 0; o < count && *n_out < max && !st; o++) {
            OrtHardwareDevice* v = NULL;
            if (!(st = virtual_gpu(f, o, &v)) && !(st = add_device(f, v, mode, o, NULL, &out[*n_out]))) ++*n_out;
        }
        if (st) return st;
    }
    if (!*n_out)
        warn_no_device(f, !d ? (why ? why : "no CUDA driver")
                              : n_nv ? "no CUDA device matches the NVIDIA GPUs ONNX Runtime found"
                                     : "the CUDA driver reports no device");
    return NULL;
}

static OrtStatus* f_create_ep(OrtEpFactory* base, const OrtHardwareDevice* const* hw,
                              const OrtKeyValuePairs* const* meta, size_t n, const OrtSessionOptions* so,
                              const OrtLogger* logger, OrtEp** out) {
    (void)base, (void)hw;
    *out = NULL;
    if (!n) return plus_ep_status(ORT_INVALID_ARGUMENT, "PlusEP: CreateEp without a device");
    const OrtApi* api = plus_ep_api;
    const char* mode = meta && meta[0] ? ORT_CALL(api, GetKeyValue)(meta[0], "plus_ep.mode") : NULL;
    const char* ord = meta && meta[0] ? ORT_CALL(api, GetKeyValue)(meta[0], "plus_ep.cuda_ordinal") : NULL;
    const char* why = meta && meta[0] ? ORT_CALL(api, GetKeyValue)(meta[0], "plus_ep.reason") : NULL;
    int m = !mode ? PLUS_MODE_INERT : !strcmp(mode, "gpu") ? PLUS_MODE_GPU : !strcmp(mode, "staging") ? PLUS_MODE_STAGING
                                                                                                     : PLUS_MODE_INERT;
    if (n > 1)
        plus_ep_log(logger, ORT_LOG_WARNING, "PlusEP: the session selected %zu PlusEP devices; PlusEP runs on the first "
                    "(one EP per device: create one session per GPU)", n);
    return plus_ep_create(m, ord ? atoi(ord) : 0, why ? why : "", so, logger, out);
}

static void f_release_ep(OrtEpFactory* base, OrtEp* ep) {
    (void)base;
    plus_ep_destroy(ep);
}

static OrtStatus* f_validate(OrtEpFactory* base, const OrtHardwareDevice* const* hw, size_t n, const char* info,
                             int* out) {
    (void)base, (void)hw, (void)n, (void)info;
    *out = 0;   /* OrtCompiledModelCompatibility_EP_NOT_APPLICABLE: PlusEP writes no EP context models */
    return NULL;
}

static OrtStatus* f_create_allocator(OrtEpFactory* base, const OrtMemoryInfo* info, const OrtKeyValuePairs* options,
                                     OrtAllocator** out) {
    (void)base, (void)options;
    return plus_ep_create_allocator(info, out);
}

static void f_release_allocator(OrtEpFactory* base, OrtAllocator* a) {
    (void)base;
    plus_ep_release_allocator(a);
}

static OrtStatus* f_create_transfer(OrtEpFactory* base, OrtDataTransferImpl** out) {
    plus_factory* f = (plus_factory*)base;
    *out = NULL;
    int gpu = 0;
    for (int i = 0; i < PLUS_EP_MAX_DEVICES; i++) gpu |= f->mem[i] != NULL;
    if (!gpu) return NULL;   /* CPU device only: nothing to copy */
    return plus_ep_create_data_transfer(out);   /* ORT owns it: it calls its Release */
}

/* Not stream-aware: PlusEP nodes run on the stream ORT creates for the device (the CUDA EP's when it is
 * in the session), which is what the custom-op path does too (ort-plugin-ep.md §3). */
static bool f_stream_aware(const OrtEpFactory* base) { (void)base; return false; }
static OrtStatus* f_create_stream(OrtEpFactory* base, const OrtMemoryDevice* md, const OrtKeyValuePairs* options,
                                  OrtSyncStreamImpl** out) {
    (void)base, (void)md, (void)options;
    *out = NULL;
    return NULL;
}

/* ---- version negotiation and the exported entry points ---- */

/* The newest API this ORT has, capped at ours: 1.x releases serve API x. Parsed from the version string
 * so that no GetApi(too new) call prints ORT's "not available" complaint. */
static uint32_t negotiate(const OrtApiBase* base, char* ort_version, size_t n) {
    const char* v = base->GetVersionString ? base->GetVersionString() : NULL;
    snprintf(ort_version, n, "%s", v ? v : "?");
    unsigned major = 0, minor = 0;
    if (v && sscanf(v, "%u.%u", &major, &minor) == 2 && major == 1)
        return minor < PLUS_EP_ORT_API_COMPILED ? minor : PLUS_EP_ORT_API_COMPILED;
    for (uint32_t a = PLUS_EP_ORT_API_COMPILED; a >= PLUS_EP_ORT_API_MIN; a--)
        if (base->GetApi(a)) return a;
    return 0;
}

EXPORT OrtStatus* CreateEpFactories(const char* registered_name, const OrtApiBase* base, const OrtLogger* logger,
                                    OrtEpFactory** factories, size_t max_factories, size_t* num_factories) {
    (void)registered_name;
    *num_factories = 0;
    char version[64];
    uint32_t want = negotiate(base, version, sizeof version);
    const OrtApi* api = want >= PLUS_EP_ORT_API_MIN ? base->GetApi(want) : NULL;
    if (!api) {
        /* Any table can make the error: ask for the oldest. */
        const OrtApi* any = base->GetApi(1);
        char msg[256];
        snprintf(msg, sizeof msg, "PlusEP needs ONNX Runtime >= 1.%d as a plugin execution provider (C API %d); this is "
                 "ONNX Runtime %s. Older versions can still run rewritten models through RegisterCustomOps.",
                 PLUS_EP_ORT_API_MIN, PLUS_EP_ORT_API_MIN, version);
        return any ? ORT_CALL(any, CreateStatus)(ORT_FAIL, msg) : NULL;
    }
    if (max_factories < 1) return ORT_CALL(api, CreateStatus)(ORT_INVALID_ARGUMENT, "PlusEP: no room for its factory");
    plus_ep_api = api;
    plus_ep_epapi = ORT_CALL(api, GetEpApi)();
    plus_ep_version = want;
    plus_factory* f = &g_factory;
    if (!f->base.GetName) {   /* first registration in this process */
        f->base.ort_version_supported = want;
        f->base.GetName = f_name;
        f->base.GetVendor = f_vendor;
        f->base.GetSupportedDevices = f_devices;
        f->base.CreateEp = f_create_ep;
        f->base.ReleaseEp = f_release_ep;
        f->base.GetVendorId = f_vendor_id;
        f->base.GetVersion = f_version;
        f->base.ValidateCompiledModelCompatibilityInfo = f_validate;
        f->base.CreateAllocator = f_create_allocator;
        f->base.ReleaseAllocator = f_release_allocator;
        f->base.CreateDataTransfer = f_create_transfer;
        f->base.IsStreamAware = f_stream_aware;
        f->base.CreateSyncStreamForDevice = f_create_stream;
    }
    if (logger) f->logger = logger;   /* the latest registration's (one ORT environment per process) */
    if (logger) plus_ep_set_default_logger(logger);
    factories[0] = &f->base;
    *num_factories = 1;
    return NULL;
}

EXPORT OrtStatus* ReleaseEpFactory(OrtEpFactory* base) {
    plus_factory* f = (plus_factory*)base;
    if (f != &g_factory || !plus_ep_api) return NULL;
    for (int i = 0; i < PLUS_EP_MAX_DEVICES; i++)
        if (f->mem[i]) ORT_CALL(plus_ep_api, ReleaseMemoryInfo)(f->mem[i]), f->mem[i] = NULL;
    /* Hardware devices we created: ORT's EP devices refer to them until here. */
    for (int i = 0; i < f->n_virt; i++) EP_CALL(plus_ep_epapi, ReleaseHardwareDevice)(f->virt[i]);
    f->n_virt = 0;
    plus_ep_stats_free();
    return NULL;
}
