#include "ort_tensor.h"

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
