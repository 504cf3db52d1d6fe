#include "ort_tensor.h"

#include "dtype.h"

OrtStatus* plus_ort_describe(const OrtApi* api, const OrtValue* v, int* dtype, int* rank, int64_t* dims,
                             long long* elems, void** data, int* too_deep) {
    OrtTensorTypeAndShapeInfo* ti = NULL;
    size_t r = 0;
    *too_deep = 0;
    OrtStatus* st = ORT_CALL(api, GetTensorTypeAndShape)(v, &ti);
    if (!st) st = ORT_CALL(api, GetTensorElementType)(ti, dtype);
    if (!st) st = ORT_CALL(api, GetDimensionsCount)(ti, &r);
    if (!st && r > PLUS_MAX_RANK) {
        ORT_CALL(api, ReleaseTensorTypeAndShapeInfo)(ti);
        *too_deep = 1;
        return NULL;
    }
    if (!st) st = ORT_CALL(api, GetDimensions)(ti, dims, r);
    if (ti) ORT_CALL(api, ReleaseTensorTypeAndShapeInfo)(ti);
    if (!st) st = ORT_CALL(api, GetTensorMutableData)((OrtValue*)v, data);
    if (st) return st;
    *rank = (int)r;
    long long n = 1;
    for (size_t d = 0; d < r; d++)
        if (__builtin_mul_overflow(n, (long long)dims[d], &n)) n = -1;
    *elems = n;
    return NULL;
}

const char* plus_ort_tensor_problem(int dtype, int rank, const int64_t* dims, long long elems, const void* data,
                                    int want_rank, const int64_t* want_dims) {
    for (int d = 0; d < rank; d++)
        if (dims[d] < 0) return "it has a negative dim";
    if (elems < 0) return "its element count overflows int64";
    if (plus_tensor_bytes(dtype, elems) < 0) return "its element type has no fixed size";
    if (elems > 0 && !data) return "it has no data";
    if (want_rank >= 0) {
        int same = rank == want_rank;
        for (int d = 0; d < rank && same; d++) same = dims[d] == want_dims[d];
        if (!same) return "ONNX Runtime allocated another shape than the one the plan computed";
    }
    return NULL;
}
