/*
 * server.h - what the API's files share: struct api, the route table's flags and the
 * handlers (route_targets.c, route_query.c, route_intarget.c, route_ops.c), which routes.c
 * calls once the request is checked.
 * Threads: the loop thread (handlers), and jobs' run functions on workers (jobs.h).
 */
#ifndef PROBED_API_SERVER_H
#define PROBED_API_SERVER_H

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "api/api.h"
#include "common/connlimit.h"
#include "api/http.h"
#include "api/jobs.h"
#include "api/metrics.h"
#include "intarget/stubctl.h"

#define API_CONNS_MAX 512 /* connections open; past it 503, at twice it accepting pauses */
#define TRACKED_MAX 128   /* processes with allocation tracking or the torch trace on */

enum tracked_kind { TRACK_ALLOCS, TRACK_TORCH };

struct api {
    struct event_base *base;
    struct evhttp *http;
    struct api_config cfg;
    struct api_parts parts;
    struct jobs *jobs;
    struct stubctl *stubs;   /* eval and repl: the stubs injected into targets */
    struct catcher *catcher; /* `probectl catch`: the channels from caught targets */
    struct metrics *metrics; /* Prometheus /metrics, on config metrics_address */
    uint32_t rate_hz;        /* config sample_rate as last applied to the targets */
    int listen_fd;
    bool serving;              /* evhttp owns listen_fd */
    struct connlimit *clients; /* bounds on the socket's clients */

    /* allocation tracking on (allocs.h): snapshots every allocation_interval; the torch trace
     * on (torchtrace.h): drains every second; loop thread */
    struct event *tracked_timer;
    struct tracked {
        enum tracked_kind kind;
        pid_t pid;
        int64_t target_id, next_ns; /* CLOCK_MONOTONIC */
        int64_t start_time;         /* the process's (procfs.h): the daemon's own calls go to it */
        bool busy;                  /* a snapshot is running */
    } tracked[TRACKED_MAX];
    size_t n_tracked;

    atomic_uint_fast64_t requests, queries, query_errors;
};

/* What a request is, once routes.c checked it: who asks, the pid it names, its query. */
struct request {
    struct evhttp_request *req;
    const struct peer *peer;
    pid_t pid; /* the one pid it names (path, ?pid= or "pid", by its route), parsed; 0: none */
    /* R_LIVE routes: the caller's leave to act on that process, to check at every later step
     * (procfs_grant_check); .pid 0 when no pid was named */
    struct proc_grant grant;
    const struct evkeyvalq *params;
    json_t *body; /* the JSON body (an object), for routes that take one; routes.c frees it */
};

/* routes.c: every request of the socket. */
void api_on_request(struct evhttp_request *req, void *arg);

/* A handler answers on the loop (and returns the status sent), or returns the job that will
 * answer (NULL: it answered already, an error). */
typedef int (*handler_fn)(struct api *a, const struct request *rq);

int targets_list(struct api *a, const struct request *rq);
int targets_get(struct api *a, const struct request *rq);
struct job *targets_attach(struct api *a, const struct request *rq);
struct job *targets_detach(struct api *a, const struct request *rq);
struct job *targets_detach_matching(struct api *a, const struct request *rq);
struct job *query_post(struct api *a, const struct request *rq);
struct job *flamegraph_get(struct api *a, const struct request *rq);
struct job *backtrace_get(struct api *a, const struct request *rq);
struct job *nccl_get(struct api *a, const struct request *rq);
struct job *hang_post(struct api *a, const struct request *rq);
struct job *eval_post(struct api *a, const struct request *rq);
struct job *allocs_post(struct api *a, const struct request *rq);
struct job *catch_post(struct api *a, const struct request *rq);
struct job *debug_post(struct api *a, const struct request *rq);
struct job *torch_post(struct api *a, const struct request *rq);
int status_get(struct api *a, const struct request *rq);
int config_get(struct api *a, const struct request *rq);
int config_put(struct api *a, const struct request *rq);

/* route_intarget.c: the timer of snapshots and drains, and the targets resumed with them on. */
void tracked_resume(struct api *a);
void on_tracked_timer(evutil_socket_t fd, short what, void *arg);

/* A job of @kind_size bytes (struct job first, zeroed after it) for @rq's peer, in @lane, that
 * runs @run and frees its own with @free_kind (may be NULL); NULL after replying 500. */
void *job_alloc(struct api *a, const struct request *rq, size_t kind_size, enum job_lane lane,
                void (*run)(struct job *j), void (*free_kind)(struct job *j));
/* The API a job of its handlers belongs to. */
static inline struct api *job_api(const struct job *j)
{
    return j->ctx;
}
/* The scope of @p: every user's targets for root, else its own. */
struct targets_filter peer_filter(const struct peer *p);

#endif
