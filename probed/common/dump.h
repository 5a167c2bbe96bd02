/*
 * dump.h - every thread's Python stack of a process, as the JSON document of
 * `probectl backtrace --json` (docs/backtrace.md).
 *
 * Used by probectl when it reads the target itself and by the daemon for /v1/backtrace, so
 * both give the same document. Reads with libpyframes; a torn read is retried.
 * Threads: any (each call has its own libpyframes handle). Memory: the caller owns *ret.
 * Failure: -errno with the reason in @e (PYF_GONE, PYF_DENIED, PYF_NOT_PYTHON, ...).
 */
#ifndef PROBED_DUMP_H
#define PROBED_DUMP_H

#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>

#include "pyframes.h"

/* @locals_depth: the innermost frames whose locals are included (0: none). DUMP_NATIVE: mixed
 * stacks (pyframes_native.h): the process's threads are held by ptrace while their Python
 * stacks are read and their registers and native stacks copied (milliseconds), then let go in
 * every path; the copies are unwound after. DUMP_PROBED: probed's own threads (the stub's)
 * and frames (<probed...> code) shown too, marked "probed": true; by default they are left
 * out, so that the stacks read as the job's program. */
enum { DUMP_NATIVE = 1, DUMP_PROBED = 2 };
int dump_json(pid_t pid, int locals_depth, unsigned flags, json_t **ret, struct pyf_err *e);

/* The same in three steps, for reading many processes at one instant (`probectl hang`): open
 * each ahead (the slow part: finding the runtime, its layout), capture each at the instant
 * (the stacks only: no JSON made, so captures follow each other closely), then render. A
 * rendering of Python frames without locals reads nothing more from the target. */
struct dump;
int dump_open(pid_t pid, bool native, struct dump **ret, struct pyf_err *e);
int dump_capture(struct dump *d, struct pyf_err *e); /* again: replaces the last capture */
int64_t dump_read_ns(const struct dump *d);          /* when the last capture began (wall ns) */
int dump_render(struct dump *d, int locals_depth, json_t **ret, struct pyf_err *e);
void dump_free(struct dump *d); /* NULL is a no-op */

/* Unwinds native stacks while the threads are held rather than from copies (longer holds):
 * for a thread in a signal handler on an alternate stack (sigaltstack), whose interrupted
 * frames lie outside the copy of the stack it runs on, as `catch` reads a failing thread. */
void dump_unwind_held(struct dump *d);

/* Renders probed's own threads and frames too (DUMP_PROBED). */
void dump_show_probed(struct dump *d);

/* A core file's threads instead of a live process's (pyf_target_open_core): nothing is
 * stopped, no thread is on a CPU; the document has "core" (its path) and "signal" (the one
 * that ended the process, 0 for a gcore). */
int dump_open_core(const char *core_path, const char *executable, bool native, struct dump **ret,
                   struct pyf_err *e);

#endif
