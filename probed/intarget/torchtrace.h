/*
 * torchtrace.h - the torch trace: per step, what each module's forward and backward and the
 * optimizer step cost in time and memory, and the values of chosen variables, recorded inside
 * a PyTorch job by torch's global hooks (torchtrace.py, embedded, loaded through the stub as
 * the module _probed_torch) and drained into the store (tables torch_records, torch_values,
 * torch_steps; views torch_trace, torch_variables, torch_step_times, python.torch_trace,
 * python.variables).
 *
 * "on" and "off" are audited in the evals table (mode 'torch'); the drains the daemon runs on
 * its own about once a second are not (they run only probed's code). A drain runs on the
 * stub's thread, never the training thread: the job only appends to bounded buffers.
 * Threads: a worker thread per call. Failure: -errno with the reason in @err.
 */
#ifndef PROBED_TORCHTRACE_H
#define PROBED_TORCHTRACE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/procfs.h"
#include "errbuf.h"

#include "intarget/stubctl.h"

/* PROFILE arms an on-demand profile (torch.profiler for some steps: torchtrace.py's Profiler;
 * tables torch_profiles, torch_profile_events) or, with cancel, stops it. MEMORY records the
 * allocator's history for record_ms, then stores the live GPU memory by stack (gpu_memory). */
enum torch_action { TORCH_ON, TORCH_DRAIN, TORCH_OFF, TORCH_PROFILE, TORCH_MEMORY };

/* --backward: whose backward is timed. AUTO: a module's when its first 8 forwards took 200 us
 * (timing one costs a few us, torchtrace.py); ALL: every module's; NONE: only the top-level
 * modules' (the backward pass), as the others always are too. */
enum torch_backward { TORCH_BACKWARD_AUTO, TORCH_BACKWARD_ALL, TORCH_BACKWARD_NONE };
extern const char *const torch_backward_names[3]; /* "auto", "all", "none" */

struct torch_request {
    pid_t pid;
    struct proc_grant grant; /* the process, as authorised: checked at each step (procfs.h) */
    uid_t uid;               /* who asks (the evals audit row) */
    int64_t target_id;       /* the attach the rows belong to */
    enum torch_action action;
    int every;         /* ON: record every Nth step */
    const char *exprs; /* ON: "name@function,..." (checked by torch_parse_exprs), or "" */
    bool comm;         /* ON: trace torch.distributed's calls too (table comm_calls) */
    bool no_modules;   /* ON: only those (no module, optimizer or step hooks) */
    enum torch_backward backward; /* ON: which modules' backward is timed */
    bool device_time;             /* ON: CUDA events around each timed module and stage */
    int steps;                    /* PROFILE: steps to profile, or 0: */
    int duration_ms;              /* PROFILE: for this long (whole steps) */
    bool cancel;                  /* PROFILE: stop the one armed or running instead */
    int64_t profile;              /* PROFILE, MEMORY: its number (torch_run sets it) */
    int record_ms;                /* MEMORY: how long the allocations' stacks are recorded */
};

/* Checks "loss@train,acc1@train" (identifiers, at most 16); 0 or -EINVAL with the reason. */
int torch_parse_exprs(const char *exprs, struct errbuf *err);

/* What a call drained, for the daemon's counters (Prometheus); zero it before the call. */
struct torch_drained {
    uint64_t steps;                               /* steps whose wall time came */
    double step_seconds;                          /* their sum */
    uint64_t ddp_steps;                           /* DDP iterations timed (ddp_steps rows) */
    double ddp_compute_seconds, ddp_wait_seconds; /* forward + backward; comm not overlapped */
    bool has_memory, has_reserved;
    double allocated_mb, reserved_mb; /* the last record's */
    bool comm;                        /* collectives are traced (--comm) */
    uint64_t comm_calls, comm_bytes;  /* calls that completed (DDP's steps apart), their bytes */
    double comm_seconds;              /* and their time */
    bool has_comm_seq;
    int64_t comm_seq;                /* the latest c10d number of the default group ("0") */
    int64_t comm_in_flight_since_ns; /* the oldest call in flight at the drain; 0: none */
};

/* *ret_body (the caller's) is the target's state ("step", "steps_seen", "every", "exprs",
 * "dropped", "device", ...) and how many rows were stored. eval_json()'s errors, -ENOPKG torch
 * not loaded, -EALREADY the trace is off, -EIO the rows not stored. */
int torch_run(struct stubctl *sc, const char *db_path, const struct torch_request *rq,
              struct torch_drained *ret_sum, json_t **ret_body, struct errbuf *err);

#endif
