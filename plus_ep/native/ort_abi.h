/* The few ONNX Runtime C ABI items the launcher uses, declared from shared/reference/ort-c-abi.md
 * (ORT 1.31.1; no ORT header is available). OrtApi is a table of function pointers: slot N is the
 * N-th pointer. We request API version 18: the highest slot used is 278 (KernelInfoGetAllocator). */
#ifndef PLUS_ORT_ABI_H
#define PLUS_ORT_ABI_H

#include <stddef.h>
#include <stdint.h>

#define PLUS_ORT_API_VERSION 18

typedef struct OrtApi OrtApi;
typedef struct OrtStatus OrtStatus;
typedef struct OrtSessionOptions OrtSessionOptions;
typedef struct OrtCustomOpDomain OrtCustomOpDomain;
typedef struct OrtKernelInfo OrtKernelInfo;
typedef struct OrtKernelContext OrtKernelContext;
typedef struct OrtValue OrtValue;
typedef struct OrtTensorTypeAndShapeInfo OrtTensorTypeAndShapeInfo;
typedef struct OrtMemoryInfo OrtMemoryInfo;
typedef struct OrtLogger OrtLogger;
typedef struct OrtShapeInferContext OrtShapeInferContext;
typedef struct OrtOpAttr OrtOpAttr;

typedef struct OrtApiBase {
    const OrtApi* (*GetApi)(uint32_t version);
    const char* (*GetVersionString)(void);
} OrtApiBase;

/* OrtAllocator: only the first four members are guaranteed (sheet §4). */
typedef struct OrtAllocator {
    uint32_t version;
    void* (*Alloc)(struct OrtAllocator*, size_t);
    void (*Free)(struct OrtAllocator*, void*);
    const OrtMemoryInfo* (*Info)(const struct OrtAllocator*);
} OrtAllocator;

/* Enum values (sheet §4). */
enum { ORT_OK = 0, ORT_FAIL = 1, ORT_INVALID_ARGUMENT = 2 };
enum { ORT_LOG_WARNING = 2 };
enum { ORT_CHAR_REQUIRED = 0, ORT_CHAR_OPTIONAL = 1, ORT_CHAR_VARIADIC = 2 };
enum { ORT_MEM_CPU_INPUT = -2, ORT_MEM_DEFAULT = 0 };   /* OrtMemType (sheet §4) */
enum { ORT_TENSOR_UINT8 = 2 };
enum { ORT_OP_ATTR_STRING = 5 };

/* OrtCustomOp: 26 fields, 208 bytes on 64-bit (sheet §3). */
typedef struct OrtCustomOp {
    uint32_t version;
    void* (*CreateKernel)(const struct OrtCustomOp*, const OrtApi*, const OrtKernelInfo*);
    const char* (*GetName)(const struct OrtCustomOp*);
    const char* (*GetExecutionProviderType)(const struct OrtCustomOp*);
    int (*GetInputType)(const struct OrtCustomOp*, size_t);
    size_t (*GetInputTypeCount)(const struct OrtCustomOp*);
    int (*GetOutputType)(const struct OrtCustomOp*, size_t);
    size_t (*GetOutputTypeCount)(const struct OrtCustomOp*);
    void (*KernelCompute)(void*, OrtKernelContext*);
    void (*KernelDestroy)(void*);
    int (*GetInputCharacteristic)(const struct OrtCustomOp*, size_t);
    int (*GetOutputCharacteristic)(const struct OrtCustomOp*, size_t);
    int (*GetInputMemoryType)(const struct OrtCustomOp*, size_t);
    int (*GetVariadicInputMinArity)(const struct OrtCustomOp*);
    int (*GetVariadicInputHomogeneity)(const struct OrtCustomOp*);
    int (*GetVariadicOutputMinArity)(const struct OrtCustomOp*);
    int (*GetVariadicOutputHomogeneity)(const struct OrtCustomOp*);
    OrtStatus* (*CreateKernelV2)(const struct OrtCustomOp*, const OrtApi*, const OrtKernelInfo*, void**);
    OrtStatus* (*KernelComputeV2)(void*, OrtKernelContext*);
    OrtStatus* (*InferOutputShapeFn)(const struct OrtCustomOp*, OrtShapeInferContext*);
    int (*GetStartVersion)(const struct OrtCustomOp*);
    int (*GetEndVersion)(const struct OrtCustomOp*);
    size_t (*GetMayInplace)(int**, int**);
    void (*ReleaseMayInplace)(int*, int*);
    size_t (*GetAliasMap)(int**, int**);
    void (*ReleaseAliasMap)(int*, int*);
} OrtCustomOp;
_Static_assert(sizeof(OrtCustomOp) == 208, "OrtCustomOp layout (ABI sheet §3)");

/* OrtApi slots used (0-based; sheet §2.2), as typed function pointers. */
typedef void (*ort_fnptr)(void);
#define ORT_SLOT(api, n) (((const ort_fnptr*)(const void*)(api))[n])
#define ORT_CALL(api, name) ((name##_fn)ORT_SLOT(api, name##_slot))

#define X(name, slot, ret, ...) typedef ret (*name##_fn)(__VA_ARGS__); enum { name##_slot = slot };
X(CreateStatus, 0, OrtStatus*, int, const char*)
X(GetErrorMessage, 2, const char*, const OrtStatus*)
X(ReleaseStatus, 93, void, OrtStatus*)
X(CreateCustomOpDomain, 26, OrtStatus*, const char*, OrtCustomOpDomain**)
X(CustomOpDomain_Add, 27, OrtStatus*, OrtCustomOpDomain*, const OrtCustomOp*)
X(AddCustomOpDomain, 28, OrtStatus*, OrtSessionOptions*, OrtCustomOpDomain*)
X(KernelInfoGetAttribute_string, 87, OrtStatus*, const OrtKernelInfo*, const char*, char*, size_t*)
X(KernelInfoGetAttribute_tensor, 236, OrtStatus*, const OrtKernelInfo*, const char*, OrtAllocator*, OrtValue**)
X(KernelInfo_GetInputCount, 230, OrtStatus*, const OrtKernelInfo*, size_t*)
X(KernelInfo_GetInputName, 232, OrtStatus*, const OrtKernelInfo*, size_t, char*, size_t*)
X(KernelInfo_GetOutputCount, 231, OrtStatus*, const OrtKernelInfo*, size_t*)
X(KernelInfo_GetOutputName, 233, OrtStatus*, const OrtKernelInfo*, size_t, char*, size_t*)
X(KernelInfo_GetNodeName, 244, OrtStatus*, const OrtKernelInfo*, char*, size_t*)
X(KernelInfo_GetLogger, 245, OrtStatus*, const OrtKernelInfo*, const OrtLogger**)
X(KernelInfoGetAllocator, 278, OrtStatus*, const OrtKernelInfo*, int, OrtAllocator**)
X(ReleaseAllocator, 132, void, OrtAllocator*)
X(GetAllocatorWithDefaultOptions, 78, OrtStatus*, OrtAllocator**)
X(AllocatorFree, 76, OrtStatus*, OrtAllocator*, void*)
X(Logger_LogMessage, 247, OrtStatus*, const OrtLogger*, int, const char*, const char*, int, const char*)
X(Logger_GetLoggingSeverityLevel, 248, OrtStatus*, const OrtLogger*, int*)
X(KernelContext_GetInputCount, 88, OrtStatus*, const OrtKernelContext*, size_t*)
X(KernelContext_GetOutputCount, 89, OrtStatus*, const OrtKernelContext*, size_t*)
X(KernelContext_GetInput, 90, OrtStatus*, const OrtKernelContext*, size_t, const OrtValue**)
X(KernelContext_GetOutput, 91, OrtStatus*, OrtKernelContext*, size_t, const int64_t*, size_t, OrtValue**)
X(KernelContext_GetGPUComputeStream, 193, OrtStatus*, const OrtKernelContext*, void**)
X(KernelContext_GetScratchBuffer, 277, OrtStatus*, const OrtKernelContext*, const OrtMemoryInfo*, size_t, void**)
X(GetTensorTypeAndShape, 65, OrtStatus*, const OrtValue*, OrtTensorTypeAndShapeInfo**)
X(GetTensorElementType, 60, OrtStatus*, const OrtTensorTypeAndShapeInfo*, int*)
X(GetDimensionsCount, 61, OrtStatus*, const OrtTensorTypeAndShapeInfo*, size_t*)
X(GetDimensions, 62, OrtStatus*, const OrtTensorTypeAndShapeInfo*, int64_t*, size_t)
X(GetTensorShapeElementCount, 64, OrtStatus*, const OrtTensorTypeAndShapeInfo*, size_t*)
X(ReleaseTensorTypeAndShapeInfo, 99, void, OrtTensorTypeAndShapeInfo*)
X(GetTensorMutableData, 51, OrtStatus*, OrtValue*, void**)
X(ReleaseValue, 96, void, OrtValue*)
X(ShapeInferContext_GetAttribute, 269, OrtStatus*, const OrtShapeInferContext*, const char*, const OrtOpAttr**)
X(ShapeInferContext_SetOutputTypeShape, 270, OrtStatus*, const OrtShapeInferContext*, size_t,
  const OrtTensorTypeAndShapeInfo*)
X(ReadOpAttr, 272, OrtStatus*, const OrtOpAttr*, int, void*, size_t, size_t*)
X(CreateTensorTypeAndShapeInfo, 57, OrtStatus*, OrtTensorTypeAndShapeInfo**)
X(SetTensorElementType, 58, OrtStatus*, OrtTensorTypeAndShapeInfo*, int)
X(SetDimensions, 59, OrtStatus*, OrtTensorTypeAndShapeInfo*, const int64_t*, size_t)
X(GetSymbolicDimensions, 63, OrtStatus*, const OrtTensorTypeAndShapeInfo*, const char**, size_t)
X(SetSymbolicDimensions, 271, OrtStatus*, OrtTensorTypeAndShapeInfo*, const char**, size_t)
X(ShapeInferContext_GetInputCount, 267, OrtStatus*, const OrtShapeInferContext*, size_t*)
X(ShapeInferContext_GetInputTypeShape, 268, OrtStatus*, const OrtShapeInferContext*, size_t,
  OrtTensorTypeAndShapeInfo**)
#undef X

#endif
