/* What the plugin-EP units (ep*.c) and the custom-op library (ort_op.c) share of ONNX Runtime: the API
 * tables negotiated in CreateEpFactories, statuses, PlusEP's log lines, a node's input/output names.
 * Below ep.h and ep_context.h, so the EPContext writer and ort_op.c reach them without reaching the EP. */
#ifndef PLUS_EP_BASE_H
#define PLUS_EP_BASE_H

#include <stdatomic.h>

#include "ep_abi.h"

#define PLUS_EP_NAME "PlusEP"
#define PLUS_EP_VERSION "0.1.0"
enum { PLUS_PART_KERNEL = 0, PLUS_PART_HOST = 1 };

/* The ORT tables negotiated in CreateEpFactories (one ORT per process). */
extern const OrtApi* plus_ep_api;
extern const OrtEpApi* plus_ep_epapi;
extern uint32_t plus_ep_version;

OrtStatus* plus_ep_status(int code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void plus_ep_drop(OrtStatus* st);   /* release a status we do not pass on */
/* PlusEP's log lines, one owner (C here; Python through PlusEP_Log, PlusEP_PlanLog): through `logger`, else
 * ORT's default logger, whose severity decides (0 verbose .. 4 fatal); stderr for warnings without either.
 * plus_ep_log_once: at most once per process, counted only when the line shows (a session at a quieter
 * severity does not use it up); returns 1 when it showed. */
void plus_ep_log(const OrtLogger* logger, int level, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
int plus_ep_log_once(const OrtLogger* logger, int level, atomic_int* once, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
int plus_ep_log_shows(const OrtLogger* logger, int level);
/* Make `logger` the one plus_ep_log falls back to (ORT's default logger, from CreateEpFactories). */
void plus_ep_set_default_logger(const OrtLogger* logger);

/* Names of a node's inputs or outputs: a malloc'ed array of pointers owned by ORT ("" for an absent one). */
OrtStatus* plus_ep_io_names(const OrtNode* n, int outputs, const char*** names, size_t* count);

#endif
