/*
 * api.h - the daemon's HTTP/1.1 JSON API on a Unix socket (libevent evhttp); docs/api.md.
 *
 * Every request is authorised from the peer's SO_PEERCRED: root may act on any process, any
 * other user only on processes it owns, and sees only their data. One table (routes.c) says
 * for each endpoint its method, its handler and what it needs (root, the pid's owner), checked
 * in one place. Quick requests (list, status, settings) are answered on the loop thread; all
 * else runs off it (jobs.h): queries, flame graphs, backtraces and evals on a worker each,
 * attach and detach one at a time on the attach thread; a slow one never delays the API, the
 * sampler or /metrics. The API also serves the settings (GET/PUT /v1/config, root to change
 * them) and owns the Prometheus listener (metrics.h).
 * Threads: the loop thread, except the jobs' run functions.
 * Memory: every request is bounded (body, headers, connections, workers, rows, reply bytes).
 */
#ifndef PROBED_API_H
#define PROBED_API_H

#include <event2/event.h>
#include <stdint.h>

#include "config.h"
#include "sample/follow.h"
#include "sample/meter.h"
#include "sample/sampler.h"
#include "sample/targets.h"
#include "store/writer.h"

struct api_config {
    const char *socket_path;
    const char *db_path;
    const char *stub_path; /* libprobed-stub.so, for eval and repl */
    int64_t query_max_rows;
    uint32_t max_rate_hz;
    struct config *config; /* live settings: rate, query time limit, metrics address */
};

/* The daemon's parts the API serves, owned by main; they outlive the API. */
struct api_parts {
    struct targets *reg;
    struct sampler *sampler;
    struct follower *follower;
    struct writer *writer;
    struct meter *meter;
    struct pusher *pusher; /* NULL: no pushing (the fuzzers) */
    struct exits *exits;   /* NULL: exits not recorded (no netlink connector) */
};

struct api;

/* Listens on cfg->socket_path (created 0660; @gid owns it when >= 0). */
int api_new(struct event_base *base, const struct api_config *cfg, int gid,
            const struct api_parts *parts, struct api **ret);
/* After a reload of probed.conf: serves the metrics address and sample rate it now says. */
int api__config_changed(struct api *a, struct errbuf *err);
/* Waits for running jobs, then frees. */
void api_free(struct api *a);

#endif
