/* Shared by the C test programs that stand in for ONNX Runtime in front of plus_ep/native/ort_op.c
 * (tests/native/ortop_host.c, tests/native/fuzz/fuzz_ortop.c): the OrtApi slots for statuses and for
 * reading a tensor's type, shape and data, over the including program's own types. Tests only.
 *
 * Before including, a program defines `struct OrtStatus { int code; char msg[N]; }` and a type `value`
 * (its tensors) with the fields `int dtype; size_t rank; size_t count; void* data;`. An OrtValue and its
 * OrtTensorTypeAndShapeInfo are both a `value*` here. */
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ort_abi.h"

static inline OrtStatus* status(int code, const char* msg) {
    OrtStatus* s = calloc(1, sizeof *s);
    s->code = code;
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    return s;
}
static inline OrtStatus* f_CreateStatus(int code, const char* msg) { return status(code, msg); }
static inline const char* f_GetErrorMessage(const OrtStatus* s) { return s->msg; }
static inline void f_ReleaseStatus(OrtStatus* s) { free(s); }

static inline OrtStatus* f_GetTensorTypeAndShape(const OrtValue* v, OrtTensorTypeAndShapeInfo** out) {
    *out = (OrtTensorTypeAndShapeInfo*)v;
    return NULL;
}
static inline void f_ReleaseTensorTypeAndShapeInfo(OrtTensorTypeAndShapeInfo* t) { (void)t; }   /* the value's own */
static inline OrtStatus* f_GetTensorElementType(const OrtTensorTypeAndShapeInfo* t, int* out) {
    *out = ((const value*)t)->dtype;
    return NULL;
}
static inline OrtStatus* f_GetDimensionsCount(const OrtTensorTypeAndShapeInfo* t, size_t* out) {
    *out = ((const value*)t)->rank;
    return NULL;
}
static inline OrtStatus* f_GetTensorShapeElementCount(const OrtTensorTypeAndShapeInfo* t, size_t* out) {
    *out = ((const value*)t)->count;
    return NULL;
}
static inline OrtStatus* f_GetTensorMutableData(OrtValue* v, void** out) { *out = ((value*)v)->data; return NULL; }

/* Point a slot of `table` at the program's f_<name>. */
#define ORT_STANDIN_SET(table, name) ((table)[name##_slot] = (ort_fnptr)f_##name)

/* Point `table`'s slots at the functions above; the program sets its own slots beside (and may
 * override one of these after). */
static inline void ort_standin_fill(ort_fnptr* table) {
    ORT_STANDIN_SET(table, CreateStatus); ORT_STANDIN_SET(table, GetErrorMessage); ORT_STANDIN_SET(table, ReleaseStatus);
    ORT_STANDIN_SET(table, GetTensorTypeAndShape); ORT_STANDIN_SET(table, ReleaseTensorTypeAndShapeInfo);
    ORT_STANDIN_SET(table, GetTensorElementType); ORT_STANDIN_SET(table, GetDimensionsCount);
    ORT_STANDIN_SET(table, GetTensorShapeElementCount); ORT_STANDIN_SET(table, GetTensorMutableData);
}
