/* The CUDA driver API, loaded at run time with dlopen (no link-time CUDA dependency).
 * Library: $PLUS_EP_CUDA_LIBRARY, else "libcuda.so.1". Only the entry points the launcher uses are
 * declared here (names and versioned symbols as cuda.h maps them; see shared/reference/nvrtc-notes.md). */
#ifndef PLUS_DRIVER_H
#define PLUS_DRIVER_H

#include <stddef.h>

typedef int CUresult;                       /* CUDA_SUCCESS = 0 */
typedef int CUdevice;
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUstream_st* CUstream;
typedef unsigned long long CUdeviceptr;

#define PLUS_CU_ATTR_CC_MAJOR 75            /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR */
#define PLUS_CU_ATTR_CC_MINOR 76
#define PLUS_CU_ATTR_SMEM_OPTIN 97          /* CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */
#define PLUS_CU_FUNC_MAX_DYN_SMEM 8         /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
#define PLUS_DEFAULT_SMEM (48 * 1024)       /* dynamic shared memory allowed without opting in */

typedef struct plus_driver {
    CUresult (*cuInit)(unsigned);
    CUresult (*cuGetErrorName)(CUresult, const char**);
    CUresult (*cuDeviceGetCount)(int*);
    CUresult (*cuDeviceGet)(CUdevice*, int);
    CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
    CUresult (*cuCtxGetCurrent)(CUcontext*);
    CUresult (*cuCtxGetDevice)(CUdevice*);
    CUresult (*cuCtxPushCurrent)(CUcontext);              /* cuCtxPushCurrent_v2 */
    CUresult (*cuCtxPopCurrent)(CUcontext*);              /* cuCtxPopCurrent_v2 */
    CUresult (*cuCtxSynchronize)(void);
    CUresult (*cuStreamGetCtx)(CUstream, CUcontext*);
    CUresult (*cuStreamSynchronize)(CUstream);
    CUresult (*cuModuleLoadData)(CUmodule*, const void*);
    CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
    CUresult (*cuModuleUnload)(CUmodule);
    CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
    CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                               CUstream, void**, void**);
    CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);         /* cuMemAlloc_v2 */
    CUresult (*cuMemFree)(CUdeviceptr);                   /* cuMemFree_v2 */
    CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);   /* cuMemcpyHtoD_v2 */
    CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);         /* cuMemcpyDtoH_v2 */
    /* optional (CUDA 12.0+; NULL when the driver lacks it): TMA descriptors, tmap.c */
    CUresult (*cuTensorMapEncodeTiled)(void*, int, unsigned, void*, const unsigned long long*, const unsigned long long*,
                                       const unsigned*, const unsigned*, int, int, int, int);
    int device_count;
} plus_driver;

/* Load the driver once per process (thread-safe). Returns NULL when it cannot be loaded, cuInit
 * fails or there is no device; *why then says which (static text). */
const plus_driver* plus_driver_get(const char** why);

/* "CUDA_ERROR_X (code)" for messages. */
void plus_cu_error(const plus_driver* d, CUresult r, char* buf, size_t n);

#endif
