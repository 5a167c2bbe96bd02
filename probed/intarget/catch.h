/*
 * catch.h - `probectl catch PID`: the moment a target fails, recorded in crashes.
 *
 * `on` loads catch.py through the stub (hooks in front of sys.excepthook and threading's, the
 * stub's handler in front of each fatal signal's) and opens a channel to the stub that the
 * catch thread keeps (struct catcher). When the target fails, the failing thread sends an
 * event on it and waits, at most STUB_CATCH_WAIT_MS, for the ack:
 * - an uncaught exception comes with its traceback and each frame's locals (catch.py);
 * - for a fatal signal the catch thread reads every thread's Python stack with locals, and the
 *   native stacks, out of process (common/dump.c, opened when the catch began so that the read
 *   is quick), before it acks.
 * Each becomes a row of crashes (kind 'exception' or 'fatal-signal', its JSON in detail),
 * written after the ack on a connection of the thread's own; the kernel's word on the exit
 * follows from sample/exits.c as for any target.
 *
 * Threads: catch_run on a job worker; the catch thread reads the channels, reads stacks and
 * writes rows. Memory: a channel per caught target (CATCH_CHANNELS_MAX), with its dump handle.
 * Failure: -errno with the reason in @err. A channel that sends anything but whole events in
 * time is closed (the target is the user's, and its bytes are hostile); the target then fails
 * as it would have without the catch.
 */
#ifndef PROBED_CATCH_H
#define PROBED_CATCH_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/procfs.h"
#include "errbuf.h"

#include "intarget/stubctl.h"

#define CATCH_CHANNELS_MAX 1024
#define CATCH_LOCALS_DEPTH 16 /* a fatal signal's stacks: the innermost frames with locals */

struct catcher;

int catcher_start(const char *db_path, struct catcher **ret, struct errbuf *err);
void catcher_stop(struct catcher *c); /* NULL is a no-op */

/* Events recorded, by kind, and those lost (a channel that failed, a row not written). */
struct catch_counts {
    uint64_t exceptions, signals, lost, channels;
};
void catcher__counts(struct catcher *c, struct catch_counts *ret);

struct catch_request {
    pid_t pid;
    struct proc_grant grant; /* the process, as authorised: checked at each step (procfs.h) */
    uid_t uid;               /* who asks (the evals audit row) */
    int64_t target_id;       /* the attach the rows belong to */
    bool on;
    bool signals;    /* on: fatal signals too */
    bool postmortem; /* on: the failing thread waits in pdb on its traceback (debug.h) */
    bool resume;     /* on: the hooks are in the target already (a restarted daemon): only the
                        channel is opened again, and nothing is injected */
};

/* *ret_body (the caller's): the target's state ("on", "signals", "channel", "hooks", ...).
 * eval_json()'s errors; -EMFILE too many caught targets. */
int catch_run(struct stubctl *sc, struct catcher *ct, const char *db_path,
              const struct catch_request *rq, json_t **ret_body, struct errbuf *err);

#endif
