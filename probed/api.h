/*
 * api.h - the daemon's HTTP/1.1 JSON API on a Unix socket (libevent evhttp); docs/api.md.
 *
 * Every request is authorised from the peer's SO_PEERCRED: root may act on any process, any
 * other user only on processes it owns, and sees only their data. Quick requests (attach,
 * list, detach) are answered on the loop thread; queries, flame graphs and backtraces run on
 * a worker thread each and their reply is handed back to the loop, so a slow query never
 * delays the API or the sampler. The API also serves the settings (GET/PUT /v1/config, root
 * to change them) and owns the Prometheus listener (metrics.h).
 * Threads: the loop thread, except the workers' job functions.
 */
#ifndef PROBED_API_H
#define PROBED_API_H

#include <event2/event.h>
#include <stdint.h>

#include "config.h"
#include "meter.h"
#include "sampler.h"
#include "writer.h"

struct api_config {
    const char *socket_path;
    const char *db_path;
    const char *stub_path; /* libprobed-stub.so, for eval and repl */
    int64_t query_max_rows;
    uint32_t max_rate_hz;
    struct config *config; /* live settings: rate, query time limit, metrics address */
};

struct api;

/* Listens on cfg->socket_path (created 0660; @gid owns it when >= 0). */
int api_new(struct event_base *base, const struct api_config *cfg, int gid, struct sampler *s,
            struct writer *w, struct meter *m, int64_t next_target_id, struct api **ret);
/* After a reload of probed.conf: serves the metrics address and sample rate it now says. */
int api__config_changed(struct api *a, char *err, size_t errlen);
/* Waits for running workers, then frees. */
void api_free(struct api *a);

#endif
