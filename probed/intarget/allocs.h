/*
 * allocs.h - where a target's memory goes, by Python source line: tracemalloc inside the
 * target, driven through its stub like an eval (allocs.py, embedded), each snapshot compared
 * with the previous one and the lines that changed most stored in the allocations table
 * (view memory_allocations). The daemon takes a snapshot every config allocation_interval
 * while tracking is on, and on request.
 *
 * Tracking costs the target: tracemalloc makes allocation slower (1.5x on a loop of small
 * objects here) and keeps a record per live block, and each snapshot holds the GIL while it
 * groups every live block (about 2 us per block: 0.5 s at 200k). So it is off until asked
 * for, and "off" stops tracemalloc when probed started it (a process that traced already
 * keeps tracing).
 * Threads: a worker thread per call. Failure: -errno with the reason in @err.
 */
#ifndef PROBED_ALLOCS_H
#define PROBED_ALLOCS_H

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#include "intarget/stubctl.h"

enum allocs_action { ALLOCS_ON, ALLOCS_SNAPSHOT, ALLOCS_OFF };

struct allocs_request {
    pid_t pid;
    struct proc_grant grant; /* the process, as authorised: checked at each step (procfs.h) */
    uid_t uid;               /* who asks (the evals audit row) */
    int64_t target_id;       /* the attach the rows belong to */
    enum allocs_action action;
    int top; /* lines kept per snapshot */
};

/* *ret_body (the caller's): {"tracing", "rows": [[function, file, line, allocated_bytes,
 * allocations, live_bytes, live_blocks], ...], "ts_ns", ...}. eval_json()'s errors, -EPROTO
 * rows of the wrong shape, -EALREADY tracking is off, -EIO the rows not stored. */
int allocs_run(struct stubctl *sc, const char *db_path, const struct allocs_request *rq,
               json_t **ret_body, struct errbuf *err);

#endif
