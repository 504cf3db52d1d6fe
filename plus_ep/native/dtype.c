/* Element types (dtype.h). */
#include "dtype.h"

/* ONNX TensorProto numbers equal the C API's for 1..23; 24..26 are permuted (ABI sheet §4). */
int plus_dtype_from_onnx(int t) {
    if (t >= 1 && t <= 23) return t;
    if (t == 24) return 26;   /* FLOAT8E8M0 */
    if (t == 25) return 24;   /* UINT2 */
    if (t == 26) return 25;   /* INT2 */
    return -1;
}

static const char* const DTYPE_NAMES[] = {
    "undefined", "float32", "uint8", "int8", "uint16", "int16", "int32", "int64", "string", "bool",
    "float16", "float64", "uint32", "uint64", "complex64", "complex128", "bfloat16", "float8e4m3fn",
    "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz", "uint4", "int4", "float4e2m1", "uint2", "int2",
    "float8e8m0",
};
static const int DTYPE_BITS[] = {0, 32, 8, 8, 16, 16, 32, 64, 0, 8, 16, 64, 32, 64, 64, 128, 16, 8, 8, 8, 8,
                                 4, 4, 4, 2, 2, 8};

const char* plus_dtype_name(int t) {
    return t >= 0 && t < (int)(sizeof DTYPE_NAMES / sizeof *DTYPE_NAMES) ? DTYPE_NAMES[t] : "unknown";
}

int plus_dtype_bits(int t) {
    return t >= 0 && t < (int)(sizeof DTYPE_BITS / sizeof *DTYPE_BITS) ? DTYPE_BITS[t] : 0;
}

long long plus_tensor_bytes(int dtype, long long elements) {
    int bits = plus_dtype_bits(dtype);
    long long b;
    if (bits == 0 || elements < 0 || __builtin_mul_overflow(elements, (long long)bits, &b)) return -1;
    return (b + 7) / 8;
}
