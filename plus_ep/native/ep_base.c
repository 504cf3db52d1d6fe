/* ONNX Runtime plumbing shared by the plugin-EP units and ort_op.c (ep_base.h). */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ep_base.h"
#include "plan.h"   /* PLUS_ERR_LEN */

#define EXPORT __attribute__((visibility("default")))

const OrtApi* plus_ep_api;
const OrtEpApi* plus_ep_epapi;
uint32_t plus_ep_version;

/* ---- small helpers shared by the ep*.c files ---- */

OrtStatus* plus_ep_status(int code, const char* fmt, ...) {
    char msg[PLUS_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ORT_CALL(plus_ep_api, CreateStatus)(code, msg);
}

void plus_ep_drop(OrtStatus* st) {
    if (st) ORT_CALL(plus_ep_api, ReleaseStatus)(st);
}

static _Atomic(const OrtLogger*) g_default_logger;   /* ORT's default logger (CreateEpFactories) */

static const OrtLogger* logger_or_default(const OrtLogger* logger) {
    return logger ? logger : atomic_load(&g_default_logger);
}

/* The severity `logger` (else the default logger) shows from; ORT_LOG_WARNING without either. */
static int severity_of(const OrtLogger* logger) {
    int level = ORT_LOG_WARNING;
    if (logger && plus_ep_api) {
        OrtStatus* st = ORT_CALL(plus_ep_api, Logger_GetLoggingSeverityLevel)(logger, &level);
        if (st) plus_ep_drop(st), level = ORT_LOG_WARNING;
    }
    return level;
}

int plus_ep_log_shows(const OrtLogger* logger, int level) {
    return level >= severity_of(logger_or_default(logger));
}

static void log_text(const OrtLogger* logger, int level, const char* msg) {
    logger = logger_or_default(logger);
    if (logger && plus_ep_api)
        plus_ep_drop(ORT_CALL(plus_ep_api, Logger_LogMessage)(logger, level, msg, __FILE__, __LINE__, "PlusEP"));
    else if (level >= ORT_LOG_WARNING) fprintf(stderr, "%s\n", msg);
}

static void log_va(const OrtLogger* logger, int level, const char* fmt, va_list ap) {
    char msg[PLUS_ERR_LEN];
    vsnprintf(msg, sizeof msg, fmt, ap);
    log_text(logger, level, msg);
}

void plus_ep_log(const OrtLogger* logger, int level, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    log_va(logger, level, fmt, ap);
    va_end(ap);
}

int plus_ep_log_once(const OrtLogger* logger, int level, atomic_int* once, const char* fmt, ...) {
    if (!plus_ep_log_shows(logger, level) || atomic_exchange(once, 1)) return 0;
    va_list ap;
    va_start(ap, fmt);
    log_va(logger, level, fmt, ap);
    va_end(ap);
    return 1;
}

/* Python's side of the owner (plus_ep/ortlog.py): the default logger's severity (-1 when the library was
 * not registered as an execution provider: no logger), and a line through it. */
EXPORT int PlusEP_LogSeverity(void) {
    const OrtLogger* logger = atomic_load(&g_default_logger);
    return logger && plus_ep_api ? severity_of(logger) : -1;
}

EXPORT void PlusEP_Log(int level, const char* msg) { log_text(NULL, level, msg ? msg : ""); }

void plus_ep_set_default_logger(const OrtLogger* logger) { atomic_store(&g_default_logger, logger); }

/* Names of a node's inputs or outputs (pointers owned by ORT; "" for an absent optional one). */
OrtStatus* plus_ep_io_names(const OrtNode* n, int outputs, const char*** names, size_t* count) {
    const OrtApi* api = plus_ep_api;
    *names = NULL;
    OrtStatus* st = outputs ? ORT_CALL(api, Node_GetNumOutputs)(n, count) : ORT_CALL(api, Node_GetNumInputs)(n, count);
    if (st) return st;
    const OrtValueInfo** vi = calloc(*count ? *count : 1, sizeof *vi);
    const char** v = calloc(*count ? *count : 1, sizeof *v);
    if (!vi || !v) return free(vi), free(v), plus_ep_status(ORT_FAIL, "PlusEP: out of memory");
    st = outputs ? ORT_CALL(api, Node_GetOutputs)(n, vi, *count) : ORT_CALL(api, Node_GetInputs)(n, vi, *count);
    for (size_t i = 0; i < *count && !st; i++) {
        v[i] = "";
        if (vi[i]) {
            const char* s = NULL;
            if ((st = ORT_CALL(api, GetValueInfoName)(vi[i], &s))) break;
            v[i] = s ? s : "";
        }
    }
    free(vi);
    if (st) return free(v), st;
    *names = v;
    return NULL;
}

