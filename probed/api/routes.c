/*
 * routes.c - the API's one table of endpoints, and the checks every request passes, in order:
 * connection bounds, who asks (SO_PEERCRED), a well-formed request, 404 / 405 from the table,
 * the JSON body, then what the route's flags ask (root; the pid's owner), and last the handler,
 * answered on the loop or handed to a job (jobs.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/server.h"

#define R_ROOT 1u        /* root only */
#define R_BODY 2u        /* a JSON object body: rq->body */
#define R_PID_BODY 4u    /* the request names a pid: the body's "pid" */
#define R_PID_QUERY 8u   /* ... or ?pid= */
#define R_PID_PATH 16u   /* ... or the path ends in /<pid> */
#define R_PID_NEEDED 32u /* and must (else 0, or absent, means none: a scope's "every pid") */
/* the pid is a live process the caller may act on (its owner by the kernel's rule, or root):
 * checked here, and the grant (rq->grant) checked again by every later step */
#define R_LIVE 64u
#define R_PID (R_PID_BODY | R_PID_QUERY | R_PID_PATH)

/* A handler that answers on the loop, or one that makes the job that will (NULL: answered). */
typedef struct job *(*job_fn)(struct api *a, const struct request *rq);

static const struct route {
    enum evhttp_cmd_type method;
    const char *path; /* with R_PID_PATH, the prefix before the pid */
    unsigned flags;
    handler_fn answer; /* either this, on the loop thread */
    job_fn job;        /* or this, whose job runs on a worker */
} routes[] = {
    {EVHTTP_REQ_GET, "/v1/status", 0, status_get, NULL},
    {EVHTTP_REQ_GET, "/v1/targets", 0, targets_list, NULL},
    {EVHTTP_REQ_POST, "/v1/targets", R_BODY | R_PID_BODY | R_LIVE, NULL, targets_attach},
    {EVHTTP_REQ_GET, "/v1/targets/", R_PID_PATH | R_PID_NEEDED, targets_get, NULL},
    {EVHTTP_REQ_DELETE, "/v1/targets/", R_PID_PATH | R_PID_NEEDED, NULL, targets_detach},
    {EVHTTP_REQ_DELETE, "/v1/targets", 0, NULL, targets_detach_matching},
    {EVHTTP_REQ_POST, "/v1/query", R_BODY | R_PID_BODY, NULL, query_post},
    {EVHTTP_REQ_GET, "/v1/flamegraph", R_PID_QUERY | R_PID_NEEDED, NULL, flamegraph_get},
    {EVHTTP_REQ_GET, "/v1/backtrace", R_PID_QUERY | R_PID_NEEDED | R_LIVE, NULL, backtrace_get},
    {EVHTTP_REQ_GET, "/v1/nccl", R_PID_QUERY | R_PID_NEEDED | R_LIVE, NULL, nccl_get},
    {EVHTTP_REQ_POST, "/v1/hang", R_BODY, NULL, hang_post},
    {EVHTTP_REQ_POST, "/v1/eval", R_BODY | R_PID_BODY | R_PID_NEEDED | R_LIVE, NULL, eval_post},
    {EVHTTP_REQ_POST, "/v1/allocations", R_BODY | R_PID_BODY | R_PID_NEEDED | R_LIVE, NULL,
     allocs_post},
    {EVHTTP_REQ_POST, "/v1/torch", R_BODY | R_PID_BODY | R_PID_NEEDED | R_LIVE, NULL, torch_post},
    {EVHTTP_REQ_POST, "/v1/catch", R_BODY | R_PID_BODY | R_PID_NEEDED | R_LIVE, NULL, catch_post},
    {EVHTTP_REQ_POST, "/v1/debug", R_BODY | R_PID_BODY | R_PID_NEEDED | R_LIVE, NULL, debug_post},
    {EVHTTP_REQ_GET, "/v1/config", 0, config_get, NULL},
    {EVHTTP_REQ_PUT, "/v1/config", R_ROOT | R_BODY, config_put, NULL},
};
#define N_ROUTES (sizeof(routes) / sizeof(routes[0]))

static const char *method_name(enum evhttp_cmd_type m)
{
    switch (m) {
    case EVHTTP_REQ_GET:
        return "GET";
    case EVHTTP_REQ_POST:
        return "POST";
    case EVHTTP_REQ_PUT:
        return "PUT";
    case EVHTTP_REQ_DELETE:
        return "DELETE";
    default:
        return "?";
    }
}

/* Whether @path is @r's: the same, or (R_PID_PATH) its prefix and then anything. */
static bool path_is(const struct route *r, const char *path)
{
    size_t n = strlen(r->path);

    if (r->flags & R_PID_PATH)
        return strncmp(path, r->path, n) == 0 && path[n];
    return strcmp(path, r->path) == 0;
}

/* The pid @r's request names, read once and strictly into rq->pid (0: none named); -EINVAL
 * after replying 400. Handlers read no pid of their own. */
static int request_pid(const struct route *r, struct request *rq, const char *path)
{
    const char *text = NULL;
    json_t *j = NULL;
    uint64_t v = 0;
    bool named;

    if (r->flags & R_PID_PATH)
        text = path + strlen(r->path);
    else if (r->flags & R_PID_QUERY)
        text = evhttp_find_header(rq->params, "pid");
    else
        j = json_object_get(rq->body, "pid");
    named = text || j;
    if (text && parse_uint(text, UINT64_MAX, &v) < 0)
        return reply_error(rq->req, 400, "pid '%.32s': not a pid (decimal digits only)", text),
               -EINVAL;
    if (j && (!json_is_integer(j) || json_integer_value(j) < 0))
        return reply_error(rq->req, 400, "\"pid\" must be an integer from 1 to %d", API_PID_MAX),
               -EINVAL;
    if (j)
        v = (uint64_t)json_integer_value(j);
    if (v > API_PID_MAX) /* a pid the kernel cannot give: never cut to one it can */
        return reply_error(rq->req, 400, "pid %llu: no such process (a pid is at most %d)",
                           (unsigned long long)v, API_PID_MAX),
               -EINVAL;
    if (v == 0 && (r->flags & R_PID_NEEDED))
        return reply_error(rq->req, 400, "%s needs a pid from 1 to %d%s", r->path, API_PID_MAX,
                           named ? " (0 is none)" : ""),
               -EINVAL;
    rq->pid = (pid_t)v;
    return 0;
}

/* 405 with the methods @path answers, when it is a known path; else 404. */
static int not_routed(struct evhttp_request *req, const char *path)
{
    char allow[64] = "";
    size_t len = 0;

    for (size_t i = 0; i < N_ROUTES; i++)
        if (path_is(&routes[i], path))
            len += (size_t)snprintf(allow + len, sizeof(allow) - len, "%s%s", len ? ", " : "",
                                    method_name(routes[i].method));
    if (!len)
        return reply_error(req, 404, "no such endpoint: %s (see docs/api.md)", path);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", allow);
    return reply_error(req, 405, "%s answers %s only", path, allow);
}

static void dispatch(struct api *a, struct request *rq, const char *path)
{
    enum evhttp_cmd_type m = evhttp_request_get_command(rq->req);
    const struct route *r = NULL;

    for (size_t i = 0; i < N_ROUTES && !r; i++)
        if (routes[i].method == m && path_is(&routes[i], path))
            r = &routes[i];
    if (!r) {
        not_routed(rq->req, path);
        return;
    }
    if ((r->flags & R_BODY) && !(rq->body = body_json(rq->req)))
        return; /* 400 sent */
    if ((r->flags & R_ROOT) && !rq->peer->root) {
        reply_error(rq->req, 403, "only root may change probed's settings");
        return;
    }
    if ((r->flags & R_PID) && request_pid(r, rq, path) < 0)
        return; /* 400 sent */
    if ((r->flags & R_LIVE) && rq->pid && authorise_pid(rq->req, rq->peer, rq->pid, &rq->grant) < 0)
        return; /* 404 or 403 sent */
    if (r->answer) {
        r->answer(a, rq);
    } else {
        struct job *j = r->job(a, rq);
        if (j)
            jobs__start(a->jobs, j);
    }
}

void api_on_request(struct evhttp_request *req, void *arg)
{
    struct api *a = arg;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    const char *query = uri ? evhttp_uri_get_query(uri) : NULL;
    struct evkeyvalq params;
    struct request rq = {.req = req, .params = &params};
    struct peer p;

    a->requests++;
    if (!connlimit__request(a->clients, req)) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
        reply_error(req, 503, "too many connections (over %d); try again", API_CONNS_MAX);
        return;
    }
    if (peer_of(req, &p) < 0) {
        reply_error(req, 403, "cannot tell who is asking (SO_PEERCRED failed)");
        return;
    }
    rq.peer = &p;
    if (!path) {
        reply_error(req, 400, "malformed request URI");
        return;
    }
    if (ambiguous_length(req)) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
        reply_error(req, 400,
                    "the body's length is given twice (Content-Length, "
                    "Transfer-Encoding): refused");
        return;
    }
    TAILQ_INIT(&params);
    /* a NUL decoded into a value would end it early: "123%00..." read as 123 */
    if (query && (strstr(query, "%00") || evhttp_parse_query_str(query, &params) < 0)) {
        reply_error(req, 400, "malformed query string");
        return;
    }
    dispatch(a, &rq, path);
    json_decref(rq.body);
    evhttp_clear_headers(&params);
}
