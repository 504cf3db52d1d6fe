/* The ONNX Runtime plugin-EP ABI items PlusEP uses, declared from shared/reference/ort-plugin-ep.md
 * (slot tables of OrtEpFactory / OrtEp / OrtEpApi, measured against ORT 1.25-1.32) and
 * shared/reference/ort-c-abi.md (OrtApi slots). No ORT header is shipped or copied: as in ort_abi.h,
 * every table is an array of function pointers and only the slots PlusEP calls are named.
 *
 * Structs we fill (OrtEpFactory, OrtEp, OrtNodeComputeInfo, OrtDataTransferImpl, OrtAllocator) are
 * laid out as of API 28 (ORT 1.28); ORT reads only the fields of the version we put in
 * `ort_version_supported`, which is the API version negotiated in CreateEpFactories (25..28). */
#ifndef PLUS_EP_ABI_H
#define PLUS_EP_ABI_H

#include <stdbool.h>

#include "ort_abi.h"

#define PLUS_EP_ORT_API_COMPILED 28   /* struct layouts below; the newest API requested */
#define PLUS_EP_ORT_API_MIN 25        /* ORT 1.25: providers=["PlusEP"] works by name */

typedef struct OrtEnv OrtEnv;
typedef struct OrtEp OrtEp;
typedef struct OrtEpFactory OrtEpFactory;
typedef struct OrtEpApi OrtEpApi;
typedef struct OrtEpDevice OrtEpDevice;
typedef struct OrtHardwareDevice OrtHardwareDevice;
typedef struct OrtKeyValuePairs OrtKeyValuePairs;
typedef struct OrtGraph OrtGraph;
typedef struct OrtNode OrtNode;
typedef struct OrtValueInfo OrtValueInfo;
typedef struct OrtEpGraphSupportInfo OrtEpGraphSupportInfo;
typedef struct OrtNodeComputeContext OrtNodeComputeContext;
typedef struct OrtMemoryDevice OrtMemoryDevice;
typedef struct OrtSyncStream OrtSyncStream;
typedef struct OrtSyncStreamImpl OrtSyncStreamImpl;
typedef struct OrtSession OrtSession;
typedef struct OrtRunOptions OrtRunOptions;
typedef struct OrtKernelRegistry OrtKernelRegistry;
typedef struct OrtKernelDefBuilder OrtKernelDefBuilder;
typedef struct OrtKernelDef OrtKernelDef;
typedef struct OrtDataType OrtDataType;

/* Enums (ort-plugin-ep.md §2; values as in the public headers). */
enum { ORT_HW_CPU = 0, ORT_HW_GPU = 1, ORT_HW_NPU = 2 };                 /* OrtHardwareDeviceType */
enum { ORT_MEMDEV_CPU = 0, ORT_MEMDEV_GPU = 1 };                         /* OrtMemoryInfoDeviceType */
enum { ORT_DEVMEM_DEFAULT = 0, ORT_DEVMEM_HOST_ACCESSIBLE = 5 };          /* OrtDeviceMemoryType */
enum { ORT_DEVICE_ALLOCATOR = 0 };                                       /* OrtAllocatorType */
enum { ORT_LOG_VERBOSE = 0, ORT_LOG_INFO = 1, ORT_LOG_ERROR = 3 };
enum { ORT_NOT_IMPLEMENTED = 9, ORT_EP_FAIL = 11 };
enum { ORT_OP_ATTR_TENSOR = 8 };
enum { ORT_MEM_CPU_OUTPUT = -1 };                                        /* OrtMemType (with ort_abi.h's) */
enum { ORT_GRAPH_CAPTURE_ALL_NODES_ON_EP = 0, ORT_GRAPH_CAPTURE_ALLOW_CPU_FOR_SHAPES = 1 };
enum { PLUS_CU_STREAM_CAPTURE_MODE_RELAXED = 2 };                        /* CUstreamCaptureMode */
#define PLUS_NVIDIA_VENDOR_ID 0x10DEu

/* OrtAllocator with the members added up to API 23 (ort-c-abi.md §4). NULL members are skipped by ORT. */
typedef struct plus_ort_allocator {
    uint32_t version;
    void* (*Alloc)(struct OrtAllocator*, size_t);
    void (*Free)(struct OrtAllocator*, void*);
    const OrtMemoryInfo* (*Info)(const struct OrtAllocator*);
    void* (*Reserve)(struct OrtAllocator*, size_t);                                  /* API 18 */
    OrtStatus* (*GetStats)(const struct OrtAllocator*, OrtKeyValuePairs**);          /* API 23 */
    void* (*AllocOnStream)(struct OrtAllocator*, size_t, OrtSyncStream*);            /* API 23 */
} plus_ort_allocator;
_Static_assert(sizeof(plus_ort_allocator) == 56, "OrtAllocator layout (API 23)");

/* ---- structs PlusEP fills (field order = slot order, ort-plugin-ep.md §2.2) ---- */

typedef struct OrtNodeFusionOptions {
    uint32_t ort_version_supported;
    bool drop_constant_initializers;
} OrtNodeFusionOptions;

typedef struct OrtNodeComputeInfo {
    uint32_t ort_version_supported;
    OrtStatus* (*CreateState)(struct OrtNodeComputeInfo*, OrtNodeComputeContext*, void**);
    OrtStatus* (*Compute)(struct OrtNodeComputeInfo*, void*, OrtKernelContext*);
    void (*ReleaseState)(struct OrtNodeComputeInfo*, void*);
} OrtNodeComputeInfo;

typedef struct OrtDataTransferImpl {
    uint32_t ort_version_supported;
    void (*Release)(struct OrtDataTransferImpl*);
    bool (*CanCopy)(const struct OrtDataTransferImpl*, const OrtMemoryDevice*, const OrtMemoryDevice*);
    OrtStatus* (*CopyTensors)(struct OrtDataTransferImpl*, const OrtValue**, OrtValue**, OrtSyncStream**, size_t);
} OrtDataTransferImpl;

typedef void (*plus_ep_slot)(void);   /* a slot PlusEP leaves NULL */

struct OrtEpFactory {
    uint32_t ort_version_supported;                                                         /* 0 */
    const char* (*GetName)(const OrtEpFactory*);                                            /* 1 */
    const char* (*GetVendor)(const OrtEpFactory*);                                          /* 2 */
    OrtStatus* (*GetSupportedDevices)(OrtEpFactory*, const OrtHardwareDevice* const*, size_t, OrtEpDevice**, size_t,
                                      size_t*);                                             /* 3 */
    OrtStatus* (*CreateEp)(OrtEpFactory*, const OrtHardwareDevice* const*, const OrtKeyValuePairs* const*, size_t,
                           const OrtSessionOptions*, const OrtLogger*, OrtEp**);            /* 4 */
    void (*ReleaseEp)(OrtEpFactory*, OrtEp*);                                               /* 5 */
    uint32_t (*GetVendorId)(const OrtEpFactory*);                                           /* 6 */
    const char* (*GetVersion)(const OrtEpFactory*);                                         /* 7 */
    OrtStatus* (*ValidateCompiledModelCompatibilityInfo)(OrtEpFactory*, const OrtHardwareDevice* const*, size_t,
                                                         const char*, int*);                /* 8 */
    OrtStatus* (*CreateAllocator)(OrtEpFactory*, const OrtMemoryInfo*, const OrtKeyValuePairs*,
                                  OrtAllocator**);                                          /* 9 */
    void (*ReleaseAllocator)(OrtEpFactory*, OrtAllocator*);                                 /* 10 */
    OrtStatus* (*CreateDataTransfer)(OrtEpFactory*, OrtDataTransferImpl**);                 /* 11 */
    bool (*IsStreamAware)(const OrtEpFactory*);                                             /* 12 */
    OrtStatus* (*CreateSyncStreamForDevice)(OrtEpFactory*, const OrtMemoryDevice*, const OrtKeyValuePairs*,
                                            OrtSyncStreamImpl**);                           /* 13 */
    plus_ep_slot GetHardwareDeviceIncompatibilityDetails;                                   /* 14 (1.24) */
    plus_ep_slot CreateExternalResourceImporterForDevice;                                   /* 15 (1.24) */
    plus_ep_slot GetNumCustomOpDomains;                                                     /* 16 (1.24) */
    plus_ep_slot GetCustomOpDomains;                                                        /* 17 (1.24) */
    plus_ep_slot InitGraphicsInterop;                                                       /* 18 (1.25) */
    plus_ep_slot DeinitGraphicsInterop;                                                     /* 19 (1.25) */
    plus_ep_slot SelectBestModelCandidate;                                                  /* 20 (1.28) */
};
_Static_assert(sizeof(OrtEpFactory) == 21 * 8, "OrtEpFactory layout (API 28)");

struct OrtEp {
    uint32_t ort_version_supported;                                                         /* 0 */
    const char* (*GetName)(const OrtEp*);                                                   /* 1 */
    OrtStatus* (*GetCapability)(OrtEp*, const OrtGraph*, OrtEpGraphSupportInfo*);           /* 2 */
    OrtStatus* (*Compile)(OrtEp*, const OrtGraph**, const OrtNode**, size_t, OrtNodeComputeInfo**,
                          OrtNode**);                                                       /* 3 */
    void (*ReleaseNodeComputeInfos)(OrtEp*, OrtNodeComputeInfo**, size_t);                  /* 4 */
    plus_ep_slot GetPreferredDataLayout, ShouldConvertDataLayoutForOp, SetDynamicOptions;  /* 5..7 */
    OrtStatus* (*OnRunStart)(OrtEp*, const OrtRunOptions*);                                 /* 8 */
    OrtStatus* (*OnRunEnd)(OrtEp*, const OrtRunOptions*, bool);                             /* 9 */
    plus_ep_slot CreateAllocator, CreateSyncStreamForDevice, GetCompiledModelCompatibilityInfo; /* 10..12 */
    OrtStatus* (*GetKernelRegistry)(OrtEp*, const OrtKernelRegistry**);                     /* 13 (1.24) */
    plus_ep_slot IsConcurrentRunSupported, Sync, CreateProfiler;                            /* 14..16 */
    bool (*IsGraphCaptureEnabled)(const OrtEp*);                                            /* 17 (1.26) */
    bool (*IsGraphCaptured)(const OrtEp*, int);                                             /* 18 (1.26) */
    OrtStatus* (*ReplayGraph)(OrtEp*, int);                                                 /* 19 (1.26) */
    int (*GetGraphCaptureNodeAssignmentPolicy)(const OrtEp*);                               /* 20 (1.26) */
    plus_ep_slot GetAvailableResource, OnSessionInitializationEnd, GetDefaultMemoryDevice;  /* 21..23 */
    OrtStatus* (*ReleaseCapturedGraph)(OrtEp*, int);                                        /* 24 (1.27) */
};
_Static_assert(sizeof(OrtEp) == 25 * 8, "OrtEp layout (API 28)");

/* A kernel of the EP's kernel registry (OrtEp::GetKernelRegistry, 1.24; `flags` and the pre-packing
 * members from 1.25 on, NULL = not used). */
typedef struct OrtKernelImpl {
    uint32_t ort_version_supported;
    uint32_t flags;
    OrtStatus* (*Compute)(struct OrtKernelImpl*, OrtKernelContext*);
    void (*Release)(struct OrtKernelImpl*);
    plus_ep_slot PrePackWeight, SetSharedPrePackedWeight;
} OrtKernelImpl;
typedef OrtStatus* (*OrtKernelCreateFunc)(void* state, const OrtKernelInfo* info, OrtKernelImpl** out);

/* ---- OrtApi slots (ort-c-abi.md §2.2 and appendix) beyond those in ort_abi.h ---- */
#define X(name, slot, ret, ...) typedef ret (*name##_fn)(__VA_ARGS__); enum { name##_slot = slot };
X(GetErrorCode, 1, int, const OrtStatus*)
X(MemoryInfoGetName, 71, OrtStatus*, const OrtMemoryInfo*, const char**)
X(ReleaseMemoryInfo, 94, void, OrtMemoryInfo*)
X(GetTensorMemoryInfo, 194, OrtStatus*, const OrtValue*, const OrtMemoryInfo**)
X(HasSessionConfigEntry, 237, OrtStatus*, const OrtSessionOptions*, const char*, int*)
X(GetSessionConfigEntry, 238, OrtStatus*, const OrtSessionOptions*, const char*, char*, size_t*)
X(GetValueInfoName, 289, OrtStatus*, const OrtValueInfo*, const char**)
X(CreateKeyValuePairs, 295, void, OrtKeyValuePairs**)
X(AddKeyValuePair, 296, void, OrtKeyValuePairs*, const char*, const char*)
X(GetKeyValue, 297, const char*, const OrtKeyValuePairs*, const char*)
X(GetKeyValuePairs, 298, void, const OrtKeyValuePairs*, const char* const**, const char* const**, size_t*)
X(ReleaseKeyValuePairs, 300, void, OrtKeyValuePairs*)
X(HardwareDevice_Type, 307, int, const OrtHardwareDevice*)
X(HardwareDevice_VendorId, 308, uint32_t, const OrtHardwareDevice*)
X(HardwareDevice_Vendor, 309, const char*, const OrtHardwareDevice*)
X(HardwareDevice_DeviceId, 310, uint32_t, const OrtHardwareDevice*)
X(HardwareDevice_Metadata, 311, const OrtKeyValuePairs*, const OrtHardwareDevice*)
X(GetEpApi, 317, const OrtEpApi*, void)
X(GetTensorSizeInBytes, 318, OrtStatus*, const OrtValue*, size_t*)
X(CreateMemoryInfo_V2, 320, OrtStatus*, const char*, int, uint32_t, int32_t, int, size_t, int, OrtMemoryInfo**)
X(Graph_GetModelPath, 334, OrtStatus*, const OrtGraph*, const char**)
X(Graph_GetNumNodes, 344, OrtStatus*, const OrtGraph*, size_t*)
X(Graph_GetNodes, 345, OrtStatus*, const OrtGraph*, const OrtNode**, size_t)
X(Graph_GetParentNode, 346, OrtStatus*, const OrtGraph*, const OrtNode**)
X(Node_GetName, 349, OrtStatus*, const OrtNode*, const char**)
X(Node_GetOperatorType, 350, OrtStatus*, const OrtNode*, const char**)
X(Node_GetDomain, 351, OrtStatus*, const OrtNode*, const char**)
X(Node_GetNumInputs, 353, OrtStatus*, const OrtNode*, size_t*)
X(Node_GetInputs, 354, OrtStatus*, const OrtNode*, const OrtValueInfo**, size_t)
X(Node_GetNumOutputs, 355, OrtStatus*, const OrtNode*, size_t*)
X(Node_GetOutputs, 356, OrtStatus*, const OrtNode*, const OrtValueInfo**, size_t)
X(Node_GetNumAttributes, 359, OrtStatus*, const OrtNode*, size_t*)
X(Node_GetAttributes, 360, OrtStatus*, const OrtNode*, const OrtOpAttr**, size_t)
X(Node_GetAttributeByName, 361, OrtStatus*, const OrtNode*, const char*, const OrtOpAttr**)
X(OpAttr_GetTensorAttributeAsOrtValue, 362, OrtStatus*, const OrtOpAttr*, OrtValue**)
X(OpAttr_GetName, 364, OrtStatus*, const OrtOpAttr*, const char**)
X(Node_GetEpName, 368, OrtStatus*, const OrtNode*, const char**)
X(GetTensorData, 378, OrtStatus*, const OrtValue*, const void**)
X(GetSessionOptionsConfigEntries, 379, OrtStatus*, const OrtSessionOptions*, OrtKeyValuePairs**)
X(SyncStream_GetHandle, 384, void*, OrtSyncStream*)
X(GetRunConfigEntry, 373, const char*, const OrtRunOptions*, const char*)
#undef X

/* ---- OrtEpApi slots (ort-plugin-ep.md §2.4) ---- */
#define EP_CALL(ep_api, name) ((name##_fn)ORT_SLOT(ep_api, name##_slot))
#define X(name, slot, ret, ...) typedef ret (*name##_fn)(__VA_ARGS__); enum { name##_slot = slot };
X(CreateEpDevice, 0, OrtStatus*, OrtEpFactory*, const OrtHardwareDevice*, const OrtKeyValuePairs*,
  const OrtKeyValuePairs*, OrtEpDevice**)
X(EpGraphSupportInfo_AddNodesToFuse, 2, OrtStatus*, OrtEpGraphSupportInfo*, const OrtNode* const*, size_t,
  const OrtNodeFusionOptions*)
X(NodeComputeContext_NodeName, 4, const char*, const OrtNodeComputeContext*)
X(EpDevice_AddAllocatorInfo, 5, OrtStatus*, OrtEpDevice*, const OrtMemoryInfo*)
X(MemoryInfo_GetMemoryDevice, 6, const OrtMemoryDevice*, const OrtMemoryInfo*)
X(Value_GetMemoryDevice, 7, const OrtMemoryDevice*, const OrtValue*)
X(MemoryDevice_GetDeviceType, 9, int, const OrtMemoryDevice*)
X(MemoryDevice_GetMemoryType, 10, int, const OrtMemoryDevice*)
X(MemoryDevice_GetVendorId, 11, uint32_t, const OrtMemoryDevice*)
X(MemoryDevice_GetDeviceId, 12, uint32_t, const OrtMemoryDevice*)
X(CreateHardwareDevice, 16, OrtStatus*, int, uint32_t, uint32_t, const char*, const OrtKeyValuePairs*,
  OrtHardwareDevice**)
X(ReleaseHardwareDevice, 17, void, OrtHardwareDevice*)
X(CreateKernelRegistry, 18, OrtStatus*, OrtKernelRegistry**)
X(ReleaseKernelRegistry, 19, void, OrtKernelRegistry*)
X(KernelRegistry_AddKernel, 20, OrtStatus*, OrtKernelRegistry*, const OrtKernelDef*, OrtKernelCreateFunc, void*)
X(CreateKernelDefBuilder, 21, OrtStatus*, OrtKernelDefBuilder**)
X(ReleaseKernelDefBuilder, 22, void, OrtKernelDefBuilder*)
X(KernelDefBuilder_SetOperatorType, 23, OrtStatus*, OrtKernelDefBuilder*, const char*)
X(KernelDefBuilder_SetDomain, 24, OrtStatus*, OrtKernelDefBuilder*, const char*)
X(KernelDefBuilder_SetSinceVersion, 25, OrtStatus*, OrtKernelDefBuilder*, int, int)
X(KernelDefBuilder_SetExecutionProvider, 26, OrtStatus*, OrtKernelDefBuilder*, const char*)
X(KernelDefBuilder_SetInputMemType, 27, OrtStatus*, OrtKernelDefBuilder*, size_t, int)
X(KernelDefBuilder_SetOutputMemType, 28, OrtStatus*, OrtKernelDefBuilder*, size_t, int)
X(KernelDefBuilder_AddTypeConstraint, 29, OrtStatus*, OrtKernelDefBuilder*, const char*, const OrtDataType* const*,
  size_t)
X(KernelDefBuilder_Build, 32, OrtStatus*, OrtKernelDefBuilder*, OrtKernelDef**)
X(ReleaseKernelDef, 33, void, OrtKernelDef*)
X(GetTensorDataType, 40, OrtStatus*, int, const OrtDataType**)
#undef X

#endif
