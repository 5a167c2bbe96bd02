/*
 * taskdump.h - a process's asyncio tasks as the JSON document of `probectl backtrace --tasks
 * --json` (docs/backtrace.md): each task's name, state, stack and the tasks awaiting it.
 *
 * Used by probectl when it reads the target itself and by the daemon for
 * /v1/backtrace?tasks=1, so both give the same document. Reads with libpyframes
 * (pyf_target__tasks); a read that fails torn is made again.
 * Threads: any (each call has its own libpyframes handle). Memory: the caller owns *ret.
 * Failure: -errno with the reason in @e (PYF_GONE, PYF_DENIED, PYF_UNSUPPORTED, ...).
 */
#ifndef PROBED_TASKDUMP_H
#define PROBED_TASKDUMP_H

#include <jansson.h>
#include <stddef.h>
#include <sys/types.h>

#include "pyframes.h"

#define TASKDUMP_MAX 100000 /* tasks of one process shown at most; "total" says how many */

/* {pid, python_version, total, torn, tasks: [{id, name, state, tid?, waits_for?, awaited_by,
 * frames: [{func, file, line}]}]}; ids are the tasks' addresses ("0x7f..."). */
int taskdump_json(pid_t pid, size_t max, json_t **ret, struct pyf_err *e);

#endif
