/*
 * jobs.h - the API's work off its loop thread, so that no request waits behind another.
 *
 * Two lanes. Parallel: queries, flame graphs, backtraces, evals, allocation snapshots and torch
 * drains run on a thread each, at most JOBS_WORKERS_MAX at once and JOBS_USER_MAX for one user
 * who is not root (root's requests and other users' still get a worker). Serial: attach and
 * detach run one at a time, in the order asked, on one thread: opening a process (a torch
 * process, 0.2-0.8 s) or loading the eBPF program never holds up other requests or /metrics,
 * and a detach never overtakes the attach before it. A job's result is handed back to the
 * loop (event_base_once), which runs its done() and sends the reply.
 * Threads: jobs_new/free and jobs__start on the loop thread; run() on a worker.
 * Memory: a job is allocated by its handler, with struct job first, and freed by the pool
 * (after its free_kind()) once it replied or was refused.
 * Failure: a job that cannot start is answered here: 503 (all busy, a thread not started),
 * 429 (that user's share is used).
 */
#ifndef PROBED_API_JOBS_H
#define PROBED_API_JOBS_H

#include <event2/event.h>
#include <event2/http.h>
#include <jansson.h>
#include <stddef.h>
#include <sys/queue.h>

#include "common/procfs.h"
#include "query/query.h"

#define JOBS_WORKERS_MAX 8   /* parallel jobs running at once */
#define JOBS_USER_MAX 3      /* of those, for one user who is not root */
#define JOBS_SERIAL_MAX 1024 /* attaches and detaches waiting */

enum job_lane { JOB_PARALLEL, JOB_SERIAL };

struct job {
    struct evhttp_request *req; /* NULL: a job the daemon runs on its own (nothing to reply) */
    struct query_scope scope;   /* who asks: their share of workers, what they may see */
    struct proc_grant grant;    /* the process it acts on, as authorised (routes.c); pid 0: none */
    enum job_lane lane;
    void *ctx;                        /* the handler's (the api) */
    void (*run)(struct job *j);       /* on a worker: sets status and body, or raw */
    void (*done)(struct job *j);      /* loop thread, before the reply; may be NULL */
    void (*dropped)(struct job *j);   /* loop thread: refused, never ran; may be NULL */
    void (*free_kind)(struct job *j); /* frees what the job's kind holds; may be NULL */
    /* result: body (owned) is the reply unless raw (owned) is set */
    int status;
    json_t *body;
    char *raw;
    size_t raw_len;
    const char *raw_type;
    /* the pool's */
    struct jobs *pool;
    TAILQ_ENTRY(job) queue;
};

struct jobs;

int jobs_new(struct event_base *base, struct jobs **ret);
/* Waits for every running and queued job (running the loop for their replies), then frees. */
void jobs_free(struct jobs *p); /* NULL is a no-op */
/* Takes @j: starts it, or answers it (and calls its dropped()). */
void jobs__start(struct jobs *p, struct job *j);

#endif
