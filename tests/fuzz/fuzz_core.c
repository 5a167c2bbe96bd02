/*
 * fuzz_core.c - libFuzzer target for the core file reader (libpyframes/core.c): a core is a
 * file the user names, read by probectl, and every field of it is checked before use. The
 * input is the whole file; when it opens, its threads are listed and its memory read where it
 * says it has some.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("core", MFD_CLOEXEC);
    char path[64];
    struct pyf_core *c = NULL;
    struct pyf_err e;

    if (fd < 0 || write(fd, data, size) != (ssize_t)size) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    if (core_open(path, NULL, &c, &e) == 0) {
        const struct procmaps *pm = core__maps(c);
        pid_t tids[8];
        uint8_t buf[64];
        core__tids(c, tids, 8);
        for (size_t i = 0; i < pm->n && i < 8; i++) {
            struct iovec l = {buf, sizeof(buf)}, r = {(void *)(uintptr_t)pm->maps[i].start, 64};
            core_readv(c, &l, &r, 1);
            core__local_path(c, pm->maps[i].path);
        }
        for (uint64_t a = 0; a < 1 << 20; a += 4096) {
            struct iovec l = {buf, 8}, r = {(void *)(uintptr_t)a, 8};
            core_readv(c, &l, &r, 1);
        }
        core_free(c);
    }
    close(fd);
    return 0;
}
