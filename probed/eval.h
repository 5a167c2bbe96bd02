/*
 * eval.h - POST /eval: runs a user's code inside a target through its stub (stubctl.h), and
 * records who ran what there in the evals table before answering.
 *
 * The first request for a process checks that it is a CPython we support (libpyframes), then
 * loads the stub; the next ones reuse it. The audit row is written on a connection of its own
 * (evals are rare, and must be recorded even while the writer thread is busy).
 * Threads: a worker thread per request. Failure: an HTTP status and a JSON error body.
 */
#ifndef PROBED_EVAL_H
#define PROBED_EVAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "stubctl.h"

struct eval_request {
    pid_t pid;
    uid_t uid; /* who asks */
    enum stub_kind kind;
    const char *code;
    bool main_thread;
    uint32_t session; /* 0: a fresh namespace */
    int64_t timeout_ms;
    const char *mode;       /* for the audit row: 'eval', 'repl', ... */
    const char *audit_code; /* recorded in the audit row in place of the code (NULL: code) */
    bool unaudited;         /* the daemon's own reads of its own state: no audit row */
};

/* Returns the HTTP status; *ret_body is the reply (owned by the caller). */
int eval_run(struct stubctl *sc, const char *db_path, const struct eval_request *rq,
             json_t **ret_body);

/* Runs @rq, whose code (probed's own: allocs.py, torchtrace.py) prints one JSON object, and
 * returns that object in *ret_body with 200; else the status and an error body that names
 * @what: the eval's own failure, the code's exception, or output that is not a JSON object
 * (502). */
int eval_json(struct stubctl *sc, const char *db_path, const struct eval_request *rq,
              const char *what, json_t **ret_body);

#endif
