/*
 * eval.h - POST /eval: runs a user's code inside a target through its stub (stubctl.h), and
 * records who ran what there in the evals table before answering.
 *
 * The first request for a process checks that it is a CPython we support (libpyframes), then
 * loads the stub; the next ones reuse it. The audit row is written on a connection of its own
 * (evals are rare, and must be recorded even while the writer thread is busy).
 * Threads: a worker thread per request. Failure: -errno with the reason in @err.
 */
#ifndef PROBED_EVAL_H
#define PROBED_EVAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "intarget/stubctl.h"

struct eval_request {
    pid_t pid;
    struct proc_grant grant; /* the process, as authorised: checked at each step (procfs.h) */
    uid_t uid;               /* who asks */
    enum stub_kind kind;
    const char *code;
    bool main_thread;
    uint32_t session; /* 0: a fresh namespace */
    int64_t timeout_ms;
    const char *mode;       /* for the audit row: 'eval', 'repl', ... */
    const char *audit_code; /* recorded in the audit row in place of the code (NULL: code) */
    bool unaudited;         /* the daemon's own reads of its own state: no audit row */
    bool exclusive;         /* no other call in the target meanwhile (stubctl.h) */
};

/* *ret_body: the reply, {"status", "output", ...} (the caller's). -ESRCH gone, -EPERM not
 * the caller's, -ENOEXEC not a CPython we read, -E2BIG code too long, -EPROTO the stub failed
 * us, -EBUSY the target is busy with an exclusive call, -ENOMEM. */
int eval_run(struct stubctl *sc, const char *db_path, const struct eval_request *rq,
             json_t **ret_body, struct errbuf *err);

/* Runs @rq, whose code (probed's own: allocs.py, torchtrace.py) prints one JSON object, and
 * returns that object in *ret_body; else eval_run()'s errors, or -EPROTO with a message that
 * names @what: the code's exception, or output that is not a JSON object. */
int eval_json(struct stubctl *sc, const char *db_path, const struct eval_request *rq,
              const char *what, json_t **ret_body, struct errbuf *err);

/* @text as hex digits (malloc'd; NULL when memory is short): a literal any Python reads
 * safely, bytes.fromhex('...'), for what probed's own code passes into a target. */
char *eval_hex(const char *text);

#endif
