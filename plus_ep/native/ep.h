/* PlusEP as an ONNX Runtime plugin execution provider (ORT >= 1.25): what ep_factory.c, ep.c and
 * ep_memory.c share. The kernels themselves come from the launcher (kernel.h: plan, bind, packs,
 * launch, host staging), exactly as for the RegisterCustomOps path in ort_op.c.
 *
 * Devices (one OrtEpDevice each):
 *   gpu      an NVIDIA GPU ORT discovered (vendor 0x10DE), mapped to a CUDA ordinal; device memory,
 *            allocator, data transfer and Memcpy kernels on the driver API (ep_memory.c); kernels go on
 *            the stream ORT hands the node, else on PlusEP's own stream of the device, with no
 *            synchronisation per launch; optional CUDA-graph capture (ep_stream.c).
 *   staging  no NVIDIA GPU discovered but the CUDA driver the launcher loads reports a device (the
 *            emulated driver, or the tests' stand-in): the CPU device, tensors in host
 *            memory, kernels through the launcher's host staging.
 *   inert    no usable driver, or PLUS_EP_DISABLE=1: the CPU device, claims nothing, so every Fused
 *            node runs its function body on the next provider. Keeps the name "PlusEP" valid. */
#ifndef PLUS_EP_H
#define PLUS_EP_H

#include <stdatomic.h>

#include "driver.h"
#include "ep_base.h"
#include "ep_abi.h"
#include "ep_context.h"
#include "kernel.h"

#define PLUS_EP_MAX_DEVICES 16

enum { PLUS_MODE_GPU = 0, PLUS_MODE_STAGING = 1, PLUS_MODE_INERT = 2 };

/* Provider options (session config entries ep.plusep.<name>). */
typedef struct {
    char arch[32];          /* "" = the device's */
    char cache_dir[1024];
    char disable[1024];     /* comma-separated pattern names; "all" claims nothing */
    char fp32_math[16];     /* "exact" | "tf32" | "" (not set: the planner's default, tf32) */
    char trust[16];         /* "any": run unverified embedded kernels (trust.h) | "verify" | "" (the default) */
    int verify;
    int cuda_graph;         /* 1: capture the run into a CUDA graph and replay it (ep_stream.c) */
    int cuda_graph_warmup;  /* runs before the capture (default 1) */
    int kernel_times;       /* 1: CUDA events around each node's launches (PlusEP_NodeStats) */
} plus_ep_options;
/* Read and check the options; an unknown ep.plusep.* key is an error naming it. */
OrtStatus* plus_ep_read_options(const OrtSessionOptions* so, plus_ep_options* out);

/* What a compiled node runs (ep_chain.c): parts in order, each a kernel node (plan + image packs, the
 * launcher's) or a host part (an ONNX model ONNX Runtime runs on the CPU: the shape computations of a
 * contrib op's expansion that no kernel holds), reading the node's inputs, constants the node carries
 * (values a contrib op's expansion made) and earlier parts' outputs, by tensor name. */
typedef struct {
    int kind;               /* PLUS_PART_* */
    char node[PLUS_NAME_LEN];
    char** inputs;          /* tensor names in plan order ("" = absent; "a\tb": a or b, the names ONNX Runtime's
                               basic optimizations give a shared constant) */
    size_t n_inputs;
    char** outputs;         /* "" = not used */
    size_t n_outputs;
    char* plan;             /* kernel */
    int n_packs;
    char* pack_arch[PLUS_MAX_ARCHS];
    uint8_t* pack_data[PLUS_MAX_ARCHS];
    size_t pack_size[PLUS_MAX_ARCHS];
    uint8_t* model;         /* host: a serialized ONNX model */
    size_t model_size;
    plus_ctx_fused fused;   /* kernel: the Fused node it was, as the trust digest covers it (ep_context.h) */
} plus_ep_part;

typedef struct {            /* a constant a node carries */
    char* name;
    int dtype, rank;
    int64_t dims[PLUS_MAX_RANK];
    uint8_t* data;
    size_t bytes;
} plus_ep_const;

/* One planned node group (from the Python planner, for models without Fused nodes). */
typedef struct {
    char node[PLUS_NAME_LEN];
    char** members;       /* first output name of each original node of the group */
    size_t n_members;
    char** inputs;        /* the group's inputs in the graph ("a\tb" as above) */
    size_t n_inputs;
    char** outputs;
    size_t n_outputs;
    plus_ep_part* parts;  /* what runs it, in order */
    size_t n_parts, cap_parts;
    plus_ep_const* consts;
    size_t n_consts, cap_consts;
} plus_ep_group;

typedef struct {
    plus_ep_group* groups;
    size_t n, cap;
    char error[PLUS_ERR_LEN];
    const OrtLogger* logger;    /* the session's: the planner's messages go through it (PlusEP_PlanLog) */
} plus_ep_plan_request;

void plus_ep_groups_free(plus_ep_plan_request* r);

/* Planner: int planner(model_path, options_json, request) -> 0 ok; it calls PlusEP_PlanAddGroup. */
typedef int (*plus_ep_planner_fn)(const char* model_path, const char* options_json, void* request);
plus_ep_planner_fn plus_ep_get_planner(void);

/* The driver's graph entry points (optional; ok = all present). */
typedef struct {
    CUresult (*cuStreamBeginCapture)(CUstream, int);                          /* cuStreamBeginCapture_v2 */
    CUresult (*cuStreamEndCapture)(CUstream, void**);
    CUresult (*cuGraphInstantiate)(void**, void*, unsigned long long);         /* cuGraphInstantiateWithFlags */
    CUresult (*cuGraphLaunch)(void*, CUstream);
    CUresult (*cuGraphExecDestroy)(void*);
    CUresult (*cuGraphDestroy)(void*);
    int ok;
} plus_graph_api;

/* The driver's event entry points (optional; ok = all present). */
typedef struct {
    CUresult (*cuEventCreate)(void**, unsigned);
    CUresult (*cuEventRecord)(void*, CUstream);
    CUresult (*cuEventSynchronize)(void*);
    CUresult (*cuEventElapsedTime)(float*, void*, void*);                      /* _v2 when there is one */
    CUresult (*cuEventDestroy)(void*);                                          /* cuEventDestroy_v2 */
    int ok;
} plus_event_api;

typedef struct { CUdeviceptr* p; size_t* size; size_t n; } plus_ep_blocks;

/* Per-node statistics (ep_stream.c; PlusEP_NodeStats): runs through the launcher, and with
 * kernel_times=1 the device time of each run's launches from two CUDA events on the node's stream. */
typedef struct plus_ep_stat plus_ep_stat;
typedef struct plus_ep_timing {
    void* ev[2];                /* CUevent start, end */
    plus_ep_stat* stat;
    struct plus_ep_timing* next;
} plus_ep_timing;

#define PLUS_EP_MAX_GRAPHS 8
typedef struct {
    int id;                     /* the run's gpu_graph_id */
    void* graph;                /* CUgraph, CUgraphExec */
    void* exec;
    plus_ep_blocks kept;        /* pool blocks the graph's launches use */
} plus_ep_graph;

/* The EP object (ep.c). */
typedef struct plus_ep {
    OrtEp base;                 /* first: ORT hands us &base */
    int mode;                   /* PLUS_MODE_* */
    int ordinal;                /* CUDA ordinal (gpu), 0 (staging) */
    int cc_major, cc_minor;     /* the device's compute capability (gpu, staging) */
    const plus_driver* drv;
    const OrtLogger* logger;    /* the session's, valid while the session lives */
    plus_ep_options opts;
    plus_ctx_config ctx;        /* EPContext models: write them (ep.context_*), ep_context.c */
    int planned;                /* the planner ran for this EP */
    int saw_fused;              /* a GetCapability call saw Fused nodes (a rewritten model) */
    int warned_unclaimed;       /* the one warning about Fused nodes left to their bodies */
    plus_ep_plan_request plan;  /* its groups */
    char why[256];              /* inert: the reason */
    OrtKernelRegistry* registry;/* gpu: MemcpyFromHost / MemcpyToHost (ep_memory.c) */
    /* CUDA graphs (ep_stream.c) */
    int runs;                   /* runs seen by OnRunStart (warm-up count) */
    int capturing;              /* this run is being captured (graph id in capture_id) */
    int capture_id;
    int n_graphs;
    plus_ep_graph graphs[PLUS_EP_MAX_GRAPHS];
    char capture_error[PLUS_ERR_LEN];
    plus_ep_timing* pending;    /* event pairs recorded this run, read at OnRunEnd */
    plus_ep_timing* spare;
} plus_ep;

/* ---- compiled nodes (ep_chain.c) and their kernel parts (ep.c) ---- */

typedef struct plus_ep_run plus_ep_run;       /* one Compute of a compiled node */
typedef struct plus_ep_node plus_ep_node;     /* a kernel part */

/* Build the compiled node for ORT's fused node (its input and output names fin/fout). */
OrtStatus* plus_ep_chain_create(plus_ep* ep, const char* name, const plus_ctx_part* parts, size_t n_parts,
                                const plus_ctx_const* consts, size_t n_consts, const char* const* fin,
                                size_t n_fin, const char* const* fout, size_t n_fout, OrtNodeComputeInfo** out);
void plus_ep_chain_destroy(OrtNodeComputeInfo* info);
/* The EPContext node standing for a compiled node (ep_context.c writes it). */
OrtStatus* plus_ep_chain_context_node(const OrtNodeComputeInfo* info, const plus_ctx_config* cfg,
                                      const OrtGraph* graph, const OrtNode* fused, OrtNode** out);

/* ep.c: a kernel part (plan, packs; the trust check is the caller's) and its run. in_slot / out_slot:
 * where each plan input comes from and each output goes (the run's values, -1: absent / not used). */
OrtStatus* plus_ep_kernel_create(plus_ep* ep, const char* node, const char* plan, const plus_pack_src* packs,
                                 int n_packs, const char* const* input_names, size_t n_inputs,
                                 const char* const* output_names, size_t n_outputs, plus_ep_node** out);
void plus_ep_kernel_set_slots(plus_ep_node* nd, const int* in_slot, const int* out_slot);
void plus_ep_kernel_destroy(plus_ep_node* nd);
OrtStatus* plus_ep_kernel_run(plus_ep_node* nd, plus_ep_run* r);
/* ep_chain.c, during a run: a slot's value (NULL: absent), and the value an output goes to (NULL: a
 * temporary of the kernel run: the slot is not used), allocated as ORT's output or an intermediate. */
const OrtValue* plus_ep_run_input(plus_ep_run* r, int slot);
OrtStatus* plus_ep_run_output(plus_ep_run* r, int slot, int dtype, const int64_t* dims, int rank, OrtValue** v);
OrtKernelContext* plus_ep_run_context(plus_ep_run* r);
/* gpu: the node's context and stream (ORT's, foreign = 1, else PlusEP's own of the device). */
OrtStatus* plus_ep_node_stream(plus_ep* ep, OrtKernelContext* kctx, CUcontext* ctx, void** stream, int* foreign);
/* The device memory of CUDA ordinal `ordinal` as ORT knows it (ep_factory.c). */
const OrtMemoryInfo* plus_ep_memory_info(int ordinal);

/* 1 when `actual` is one of the tab-separated names of `planned` ("name" or "name\tname ORT gives it"). */
int plus_ep_name_is(const char* planned, const char* actual);

OrtStatus* plus_ep_create(int mode, int ordinal, const char* why, const OrtSessionOptions* so,
                          const OrtLogger* logger, OrtEp** out);
void plus_ep_destroy(OrtEp* ep);

/* Device memory, streams and copies on the driver API (ep_memory.c). */
typedef struct plus_cuda_extra plus_cuda_extra;
const plus_cuda_extra* plus_cuda_extra_get(void);
const plus_graph_api* plus_ep_graph_api(void);
const plus_event_api* plus_ep_event_api(void);
/* The primary context of `ordinal` (retained once per process), or NULL with err. */
CUcontext plus_ep_primary_ctx(const plus_driver* d, int ordinal, char* err, size_t errlen);
/* PlusEP's own stream of the device (blocking, made on first use), NULL when the driver has no streams. */
CUstream plus_ep_device_stream(const plus_driver* d, int ordinal, char* err, size_t errlen);
/* Temporary device memory for one launch. foreign: `stream` is another EP's (ORT handed it). */
int plus_ep_temp_alloc(const plus_driver* d, int ordinal, CUcontext ctx, CUstream stream, int foreign, size_t bytes,
                       CUdeviceptr* out, char* err, size_t errlen);
void plus_ep_temp_free(const plus_driver* d, int ordinal, CUcontext ctx, CUstream stream, int foreign, CUdeviceptr p);
/* The pool while a graph is captured: freed blocks go to the graph, which keeps them until released. */
void plus_ep_pool_capture(int ordinal, void* owner);
void plus_ep_pool_take_captured(int ordinal, plus_ep_blocks* kept);
void plus_ep_pool_release_kept(int ordinal, plus_ep_blocks* kept);
/* GPU-mode EPs of a device (+1 / -1); the last one empties the pool. */
void plus_ep_device_ref(int ordinal, int delta);
/* PCI bus id of a CUDA ordinal ("0000:3b:00.0", lower case) or "" when the driver cannot say. */
void plus_ep_pci_bus_id(const plus_driver* d, int ordinal, char* buf, size_t n);
/* 1 when the memory device is NVIDIA device memory (not host accessible). */
int plus_ep_on_gpu(const OrtMemoryDevice* md);
/* Host -> device copy of `bytes`, ordered on `stream` (NULL: legacy, synchronous); ctx pushed here. */
CUresult plus_ep_htod(const plus_driver* d, CUcontext ctx, CUdeviceptr dst, const void* src, size_t bytes,
                      CUstream stream);
/* Copy one tensor between the memories its OrtValues are in, ordered on `stream` (NULL: legacy). */
OrtStatus* plus_ep_copy_value(const plus_driver* d, const OrtValue* src, OrtValue* dst, CUstream stream);

OrtStatus* plus_ep_create_allocator(const OrtMemoryInfo* info, OrtAllocator** out);
void plus_ep_release_allocator(OrtAllocator* a);
OrtStatus* plus_ep_create_data_transfer(OrtDataTransferImpl** out);
OrtStatus* plus_ep_kernel_registry(plus_ep* ep, OrtKernelRegistry** out);

/* Run hooks and CUDA graphs (ep_stream.c): installed on the OrtEp by plus_ep_install_run_hooks. */
void plus_ep_install_run_hooks(plus_ep* ep);
void plus_ep_release_graphs(plus_ep* ep);
/* The statistics record of a node name (created on first use; lives until the factory is released). */
plus_ep_stat* plus_ep_stat_for(const char* node);
void plus_ep_stats_free(void);
/* Around one run of a node's launches on `stream`: counts the run; with kernel_times (and not while
 * capturing) records the events. begin returns the pair for end (NULL: not timed). */
plus_ep_timing* plus_ep_timing_begin(plus_ep* ep, plus_ep_stat* stat, CUstream stream);
void plus_ep_timing_end(plus_ep* ep, plus_ep_stat* stat, plus_ep_timing* t, CUstream stream, int ok);

#endif
