/*
 * inject.h - makes a running process load a shared library, without gdb and without its
 * cooperation: ptrace() stops its main thread at a safe point, has it call its own libc's
 * dlopen(), and puts every register back (../shared/notes/injection.md has the why of each
 * step: the FPU/AVX state, the syscall restart, never inside libc or the loader).
 *
 * Threads: any; one injection per target at a time (the caller serialises). It blocks for as
 * long as the target's dlopen() runs (about a millisecond). Failure: -errno, with what failed
 * and why in @err; the target is resumed in every path, and only the library's own constructor
 * runs in it.
 */
#ifndef PROBED_INJECT_H
#define PROBED_INJECT_H

#include <stddef.h>
#include <sys/types.h>

#include "common/procfs.h"
#include "errbuf.h"

/* dlopen(@path_in_target, RTLD_NOW) in @target's process; @path_in_target as the target sees
 * it. The process, once held, must still be the one granted (procfs.h), else -ESRCH or -EPERM
 * and nothing is done in it. */
int inject_library(const struct proc_grant *target, const char *path_in_target, struct errbuf *err);

#endif
