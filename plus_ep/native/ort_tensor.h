/* One OrtValue's element type, shape and data, read through the ORT C API: shared by the custom op
 * (ort_op.c) and the plugin EP (ep.c), which differ only in how they name the node in an error. */
#ifndef PLUS_ORT_TENSOR_H
#define PLUS_ORT_TENSOR_H

#include <stdint.h>

#include "ort_abi.h"
#include "plan.h"

/* Fills *dtype, *rank, dims[0..rank), *elems (-1 when the product overflows) and *data. Returns NULL,
 * or the failing API call's status for the caller to wrap with the node's name. A rank above
 * PLUS_MAX_RANK sets *too_deep and returns NULL without reading the dims. */
OrtStatus* plus_ort_describe(const OrtApi* api, const OrtValue* v, int* dtype, int* rank, int64_t* dims,
                             long long* elems, void** data, int* too_deep);

/* Why a tensor ORT handed over cannot go to a kernel, or NULL when it can: a negative dim, an element
 * count that overflows, no data behind a non-empty tensor, an element type without a size; for an
 * output (want_rank >= 0) also any shape other than the one asked for (want_dims). */
const char* plus_ort_tensor_problem(int dtype, int rank, const int64_t* dims, long long elems, const void* data,
                                    int want_rank, const int64_t* want_dims);

#endif
