/*
 * core.h - a core file (the kernel's, or gdb's gcore) as a source of a process's memory, its
 * mappings and its threads, for reading a dead process as libpyframes reads a live one
 * (remote.h reads through core_readv when a target has a core).
 *
 * Memory is what the core holds (its PT_LOAD segments), and for what the kernel left out of
 * it (pages of a mapped file never written: code, read-only data) the mapped file itself, as
 * the core's NT_FILE note names it, opened on this machine at open time (@executable stands
 * for the core's main program, when it lives elsewhere here).
 * Threads: any, once opened (nothing changes after). Memory: owned by the pyf_core.
 * Failure: -errno with the reason in @e: not an ELF core (PYF_INVALID), a core of another
 * architecture (PYF_UNSUPPORTED), unreadable (PYF_DENIED).
 */
#ifndef PYF_CORE_H
#define PYF_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "procmaps.h"
#include "pyframes.h"

struct pyf_core;

int core_open(const char *path, const char *executable, struct pyf_core **ret, struct pyf_err *e);
void core_free(struct pyf_core *c); /* NULL is a no-op */

/* remote_readv() for a core: all or nothing, -EFAULT where neither the core nor a mapped file
 * has the bytes. */
int core_readv(const struct pyf_core *c, const struct iovec *local, const struct iovec *remote,
               size_t n);

/* The process it was: pid, command name and arguments (NT_PRPSINFO), its main program, the
 * signal that killed it (0: none, a gcore of a live process). */
pid_t core__pid(const struct pyf_core *c);
const char *core__command(const struct pyf_core *c);
const char *core__executable(const struct pyf_core *c);
int core__signal(const struct pyf_core *c);
/* Its threads' ids (NT_PRSTATUS), the one that failed first; at most @cap. */
size_t core__tids(const struct pyf_core *c, pid_t *tids, size_t cap);
/* Its file mappings, as /proc/PID/maps would list them (borrowed). */
const struct procmaps *core__maps(const struct pyf_core *c);
/* Where the core's mapped file @path is read on this machine (@executable for the main
 * program). */
const char *core__local_path(const struct pyf_core *c, const char *path);
/* The path of the core file, as opened. */
const char *core__path(const struct pyf_core *c);

#endif
