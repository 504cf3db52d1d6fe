/* PlusEP as an ONNX Runtime plugin execution provider (ORT >= 1.25): what ep_factory.c, ep.c and
 * ep_memory.c share. The kernels themselves come from the launcher (kernel.h: plan, bind, packs,
 * launch, host staging), exactly as for the RegisterCustomOps path in ort_op.c.
 *
 * Devices (one OrtEpDevice each):
 *   gpu      an NVIDIA GPU ORT discovered (vendor 0x10DE), mapped to a CUDA ordinal; device memory,
 *            allocator and data transfer on the driver API; kernels go on the stream ORT hands the node.
 *   staging  no NVIDIA GPU discovered but the CUDA driver the launcher loads reports a device (the
 *            emulated driver of issue 13, or the tests' stand-in): the CPU device, tensors in host
 *            memory, kernels through the launcher's host staging.
 *   inert    no usable driver, or PLUS_EP_DISABLE=1: the CPU device, claims nothing, so every Fused
 *            node runs its function body on the next provider. Keeps the name "PlusEP" valid. */
#ifndef PLUS_EP_H
#define PLUS_EP_H

#include "driver.h"
#include "ep_abi.h"
#include "kernel.h"

#define PLUS_EP_NAME "PlusEP"
#define PLUS_EP_VERSION "0.1.0"
#define PLUS_EP_MAX_DEVICES 16

enum { PLUS_MODE_GPU = 0, PLUS_MODE_STAGING = 1, PLUS_MODE_INERT = 2 };

/* The ORT tables negotiated in CreateEpFactories (one ORT per process). */
extern const OrtApi* plus_ep_api;
extern const OrtEpApi* plus_ep_epapi;
extern uint32_t plus_ep_version;

OrtStatus* plus_ep_status(int code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void plus_ep_drop(OrtStatus* st);   /* release a status we do not pass on */
void plus_ep_log(const OrtLogger* logger, int level, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

/* Provider options (session config entries ep.plusep.<name>). */
typedef struct {
    char arch[32];          /* "" = the device's */
    char cache_dir[1024];
    char disable[1024];     /* comma-separated pattern names; "all" claims nothing */
    char fp32_math[16];     /* "exact" | "tf32" | "" (not set: the planner's default, tf32) */
    int verify;
} plus_ep_options;
/* Read and check the options; an unknown ep.plusep.* key is an error naming it. */
OrtStatus* plus_ep_read_options(const OrtSessionOptions* so, plus_ep_options* out);

/* One planned node group (from the Python planner, for models without Fused nodes). */
typedef struct {
    char node[PLUS_NAME_LEN];
    char** members;       /* first output name of each original node of the group */
    size_t n_members;
    char** inputs;        /* the Fused node's inputs in plan order ("" = absent; "a\tb": a or b, the name
                             ONNX Runtime's basic optimizations give a shared constant) */
    size_t n_inputs;
    char** outputs;
    size_t n_outputs;
    char* plan;
    int n_packs;
    char* pack_arch[PLUS_MAX_ARCHS];
    uint8_t* pack_data[PLUS_MAX_ARCHS];
    size_t pack_size[PLUS_MAX_ARCHS];
} plus_ep_group;

typedef struct {
    plus_ep_group* groups;
    size_t n, cap;
    char error[PLUS_ERR_LEN];
} plus_ep_plan_request;

void plus_ep_groups_free(plus_ep_plan_request* r);

/* Planner: int planner(model_path, options_json, request) -> 0 ok; it calls PlusEP_PlanAddGroup. */
typedef int (*plus_ep_planner_fn)(const char* model_path, const char* options_json, void* request);
plus_ep_planner_fn plus_ep_get_planner(void);

/* The EP object (ep.c). */
typedef struct plus_ep {
    OrtEp base;                 /* first: ORT hands us &base */
    int mode;                   /* PLUS_MODE_* */
    int ordinal;                /* CUDA ordinal (gpu), 0 (staging) */
    int cc_major, cc_minor;     /* the device's compute capability (gpu, staging) */
    const plus_driver* drv;
    const OrtLogger* logger;    /* the session's, valid while the session lives */
    plus_ep_options opts;
    int planned;                /* the planner ran for this EP */
    int saw_fused;              /* a GetCapability call saw Fused nodes (a rewritten model) */
    int warned_unclaimed;       /* the one warning about Fused nodes left to their bodies */
    plus_ep_plan_request plan;  /* its groups */
    char why[256];              /* inert: the reason */
} plus_ep;

OrtStatus* plus_ep_create(int mode, int ordinal, const char* why, const OrtSessionOptions* so,
                          const OrtLogger* logger, OrtEp** out);
void plus_ep_destroy(OrtEp* ep);

/* Device memory and copies on the driver API (ep_memory.c). */
typedef struct plus_cuda_extra plus_cuda_extra;
const plus_cuda_extra* plus_cuda_extra_get(void);
/* The primary context of `ordinal` (retained once per process), or NULL with err. */
CUcontext plus_ep_primary_ctx(const plus_driver* d, int ordinal, char* err, size_t errlen);
/* Temporary device memory for one launch: stream-ordered when the driver has cuMemAllocAsync. */
int plus_ep_temp_alloc(const plus_driver* d, CUcontext ctx, CUstream stream, size_t bytes, CUdeviceptr* out,
                       char* err, size_t errlen);
void plus_ep_temp_free(const plus_driver* d, CUcontext ctx, CUstream stream, CUdeviceptr p);
/* PCI bus id of a CUDA ordinal ("0000:3b:00.0", lower case) or "" when the driver cannot say. */
void plus_ep_pci_bus_id(const plus_driver* d, int ordinal, char* buf, size_t n);

OrtStatus* plus_ep_create_allocator(const OrtMemoryInfo* info, OrtAllocator** out);
void plus_ep_release_allocator(OrtAllocator* a);
OrtStatus* plus_ep_create_data_transfer(OrtDataTransferImpl** out);

#endif
