/* Element types: ONNX TensorProto numbers, ONNX Runtime's C API numbers, names and sizes. The lowest
 * unit of the launcher: it includes nothing of it, and plan.c, bind.c, kernel.c and the front ends
 * read element types here. */
#ifndef PLUS_DTYPE_H
#define PLUS_DTYPE_H

int plus_dtype_from_onnx(int onnx_dtype);       /* ONNX TensorProto number -> C API number; -1 if unknown */
const char* plus_dtype_name(int ort_dtype);     /* C API number -> "float32", ... ("unknown") */
int plus_dtype_bits(int ort_dtype);             /* bits per element; 0 for string / unknown */

/* Bytes of a tensor of that C API element type and element count (sub-byte types round up);
 * -1 for strings/unknown types, a negative count or overflow. plus_tensor_bytes(1, 6) == 24. */
long long plus_tensor_bytes(int dtype, long long elements);

#endif
