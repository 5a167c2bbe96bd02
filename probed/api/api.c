/* api.c - see api.h: the API's life (start, settings, stop); routes.c serves its requests. */
#define _GNU_SOURCE
#include "api/api.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/server.h"
#include "intarget/catch.h"
#include "log.h"

#define BODY_MAX (1 << 20) /* bytes of a request body */
#define HEADERS_MAX 16384  /* bytes of request headers */
#define IO_TIMEOUT_S 10    /* a client that stalls this long is dropped (slow loris) */
#define REQUEST_S 10       /* a connection's first request must arrive whole within this */
#define USER_CONNS_MAX 64  /* connections one user who is not root holds on the socket */
#define ROOT_CONNS 64      /* ... and those all such users leave to root */

struct targets_filter peer_filter(const struct peer *p)
{
    return (struct targets_filter){.all_users = p->root, .uid = p->uid};
}

void *job_alloc(struct api *a, const struct request *rq, size_t kind_size, enum job_lane lane,
                void (*run)(struct job *j), void (*free_kind)(struct job *j))
{
    struct job *j = calloc(1, kind_size);

    if (!j) {
        if (rq->req)
            reply_error(rq->req, 500, "out of memory");
        return NULL;
    }
    *j = (struct job){.req = rq->req,
                      .scope = {.root = rq->peer->root, .uid = rq->peer->uid, .pid = rq->pid},
                      .grant = rq->grant, /* who asks, and what they may act on */
                      .lane = lane,
                      .ctx = a,
                      .run = run,
                      .free_kind = free_kind};
    j->grant.root = rq->peer->root;
    j->grant.uid = rq->peer->uid;
    j->grant.gid = rq->peer->gid;
    return j;
}

/* Makes the running daemon follow the settings that need more than a new number. */
int api__config_changed(struct api *a, struct errbuf *err)
{
    char address[CONFIG_VALUE_MAX];
    uint32_t hz = (uint32_t)config_num(a->cfg.config, CFG_SAMPLE_RATE);

    if (hz != a->rate_hz) {
        targets__default_rate(a->parts.reg, hz);
        a->rate_hz = hz;
    }
    meter__wake(a->parts.meter);
    config_text(a->cfg.config, CFG_METRICS_ADDRESS, address, sizeof(address));
    return metrics__listen(a->metrics, address, err);
}

int api_new(struct event_base *base, const struct api_config *cfg, int gid,
            const struct api_parts *parts, struct api **ret)
{
    struct api *a = calloc(1, sizeof(*a));
    struct errbuf err;
    int r;

    if (!a)
        return -ENOMEM;
    *a = (struct api){.base = base,
                      .cfg = *cfg,
                      .parts = *parts,
                      .rate_hz = (uint32_t)config_num(cfg->config, CFG_SAMPLE_RATE),
                      .listen_fd = -1};
    r = jobs_new(base, &a->jobs);
    if (r == 0)
        r = stubctl_new(cfg->stub_path, &a->stubs);
    if (r == 0 && (r = catcher_start(cfg->db_path, &a->catcher, &err)) < 0)
        log_msg(LOG_ERR, "%s", err.msg);
    if (r == 0)
        r = metrics_new(base,
                        &(struct metrics_sources){.reg = parts->reg,
                                                  .sampler = parts->sampler,
                                                  .writer = parts->writer,
                                                  .meter = parts->meter,
                                                  .exits = parts->exits,
                                                  .catcher = a->catcher,
                                                  .db_path = cfg->db_path,
                                                  .requests = &a->requests,
                                                  .queries = &a->queries,
                                                  .query_errors = &a->query_errors,
                                                  .config = cfg->config},
                        &a->metrics);
    if (r == 0 && (r = api__config_changed(a, &err)) < 0)
        log_msg(LOG_ERR, "%s", err.msg);
    if (r < 0) {
        api_free(a);
        return r;
    }
    a->http = evhttp_new(base);
    if (!a->http) {
        api_free(a);
        return -ENOMEM;
    }
    evhttp_set_max_body_size(a->http, BODY_MAX);
    evhttp_set_max_headers_size(a->http, HEADERS_MAX);
    evhttp_set_timeout(a->http, IO_TIMEOUT_S);
    evhttp_set_allowed_methods(a->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_DELETE |
                                            EVHTTP_REQ_PUT);
    evhttp_set_gencb(a->http, api_on_request, a);
    tracked_resume(a);
    a->tracked_timer = event_new(base, -1, EV_PERSIST, on_tracked_timer, a);
    if (!a->tracked_timer ||
        event_add(a->tracked_timer, &(struct timeval){.tv_sec = 0, .tv_usec = 500000}) < 0) {
        api_free(a);
        return -ENOMEM;
    }
    r = listen_unix(cfg->socket_path, gid, &a->listen_fd);
    if (r == 0) {
        a->serving = true; /* served or closed, the fd is evhttp's now */
        r = connlimit_serve(base, a->http, a->listen_fd,
                            &(struct connlimit_config){.what = cfg->socket_path,
                                                       .max_conns = API_CONNS_MAX,
                                                       .request_s = REQUEST_S,
                                                       .per_user_max = USER_CONNS_MAX,
                                                       .root_reserve = ROOT_CONNS,
                                                       .warn = log_warning},
                            &a->clients);
        if (r < 0)
            log_errno(LOG_ERR, r, "serving on %s", cfg->socket_path);
    }
    if (r < 0) {
        api_free(a);
        return r;
    }
    *ret = a;
    return 0;
}

void api_free(struct api *a)
{
    if (!a)
        return;
    jobs_free(a->jobs); /* their replies need the loop and the connections: first */
    if (a->tracked_timer)
        event_free(a->tracked_timer);
    if (a->http)
        evhttp_free(a->http); /* closes the listening socket it serves */
    connlimit_free(a->clients);
    if (a->listen_fd >= 0 && !a->serving)
        close(a->listen_fd);
    if (a->listen_fd >= 0) /* ours: bound by listen_unix() */
        unlink(a->cfg.socket_path);
    metrics_free(a->metrics);
    catcher_stop(a->catcher);
    stubctl_free(a->stubs);
    free(a);
}
