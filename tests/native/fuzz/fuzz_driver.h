/* Loading the fuzzers' stand-in driver (fuzz_driver.c, built beside each fuzzer as
 * libfuzz_driver.so) as the launcher's CUDA library. Tests only. */
#pragma once
/* (the including file defines _GNU_SOURCE before its first include, for dlopen's RTLD_NOLOAD) */
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "driver.h"

/* Point $PLUS_EP_CUDA_LIBRARY at libfuzz_driver.so next to this executable (unless set), load the
 * launcher's driver, and resolve the stand-in's hooks. NULL with *why on failure. */
static inline const plus_driver* fuzz_load_driver(const char** why, void (**set_cc)(int), long (**live)(void)) {
    static char path[PATH_MAX + 32];
    if (!getenv("PLUS_EP_CUDA_LIBRARY")) {
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0) return *why = "cannot read /proc/self/exe", NULL;
        exe[n] = 0;
        snprintf(path, sizeof path, "%s/libfuzz_driver.so", dirname(exe));
        setenv("PLUS_EP_CUDA_LIBRARY", path, 1);
    }
    const plus_driver* d = plus_driver_get(why);
    if (!d) return NULL;
    void* h = dlopen(getenv("PLUS_EP_CUDA_LIBRARY"), RTLD_NOW | RTLD_NOLOAD);
    if (!h) return *why = "the stand-in driver is not loaded", NULL;
    *set_cc = (void (*)(int))dlsym(h, "fuzz_driver_set_cc");
    *live = (long (*)(void))dlsym(h, "fuzz_driver_live");
    if (!*set_cc || !*live) return *why = "$PLUS_EP_CUDA_LIBRARY is not the fuzzers' stand-in driver", NULL;
    return d;
}
