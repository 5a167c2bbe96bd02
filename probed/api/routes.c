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

#define R_ROOT 1u      /* root only */
#define R_BODY 2u      /* a JSON object body: rq->body */
#define R_PID_BODY 4u  /* the body's "pid", when one, is the caller's process (or root asks) */
#define R_PID_QUERY 8u /* so is ?pid= */
#define R_PID_PATH 16u /* the path ends in /<pid> */

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
    {EVHTTP_REQ_POST, "/v1/targets", R_BODY | R_PID_BODY, NULL, targets_attach},
    {EVHTTP_REQ_GET, "/v1/targets/", R_PID_PATH, targets_get, NULL},
    {EVHTTP_REQ_DELETE, "/v1/targets/", R_PID_PATH, NULL, targets_detach},
    {EVHTTP_REQ_DELETE, "/v1/targets", 0, NULL, targets_detach_matching},
    {EVHTTP_REQ_POST, "/v1/query", R_BODY, NULL, query_post},
    {EVHTTP_REQ_GET, "/v1/flamegraph", 0, NULL, flamegraph_get},
    {EVHTTP_REQ_GET, "/v1/backtrace", R_PID_QUERY, NULL, backtrace_get},
    {EVHTTP_REQ_POST, "/v1/hang", R_BODY, NULL, hang_post},
    {EVHTTP_REQ_POST, "/v1/eval", R_BODY | R_PID_BODY, NULL, eval_post},
    {EVHTTP_REQ_POST, "/v1/allocations", R_BODY | R_PID_BODY, NULL, allocs_post},
    {EVHTTP_REQ_POST, "/v1/torch", R_BODY | R_PID_BODY, NULL, torch_post},
    {EVHTTP_REQ_POST, "/v1/catch", R_BODY | R_PID_BODY, NULL, catch_post},
    {EVHTTP_REQ_POST, "/v1/debug", R_BODY | R_PID_BODY, NULL, debug_post},
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

/* "/v1/targets/123" -> 123; -1 when what follows the prefix is not a pid. */
static pid_t path_pid(const char *path, const char *prefix)
{
    char *end;
    long v = strtol(path + strlen(prefix), &end, 10);

    return *end || v <= 0 || v > 0x7fffffff ? -1 : (pid_t)v;
}

/* A well-formed pid that the request names, or 0 (its handler judges a malformed one). */
static pid_t named_pid(const struct route *r, const struct request *rq)
{
    if (r->flags & R_PID_BODY) {
        json_t *j = json_object_get(rq->body, "pid");
        json_int_t v = json_integer_value(j);
        return json_is_integer(j) && v > 0 && v <= 0x7fffffff ? (pid_t)v : 0;
    }
    if (r->flags & R_PID_QUERY) {
        long long v = param_int(rq->params, "pid");
        return v > 0 && v <= 0x7fffffff ? (pid_t)v : 0;
    }
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
    pid_t pid;

    for (size_t i = 0; i < N_ROUTES && !r; i++)
        if (routes[i].method == m && path_is(&routes[i], path))
            r = &routes[i];
    if (!r) {
        not_routed(rq->req, path);
        return;
    }
    if (r->flags & R_PID_PATH) {
        rq->path_pid = path_pid(path, r->path);
        if (rq->path_pid < 0) {
            reply_error(rq->req, 400, "expected %s<pid>", r->path);
            return;
        }
    }
    if ((r->flags & R_BODY) && !(rq->body = body_json(rq->req)))
        return; /* 400 sent */
    if ((r->flags & R_ROOT) && !rq->peer->root) {
        reply_error(rq->req, 403, "only root may change probed's settings");
        return;
    }
    if ((pid = named_pid(r, rq)) != 0 && authorise_pid(rq->req, rq->peer, pid) < 0)
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
    if (query && evhttp_parse_query_str(query, &params) < 0) {
        reply_error(req, 400, "malformed query string");
        return;
    }
    dispatch(a, &rq, path);
    json_decref(rq.body);
    evhttp_clear_headers(&params);
}
