/*
 * metrics.h - Prometheus /metrics on a TCP address (config metrics_address), text format 0.0.4.
 *
 * The daemon's health (targets, samples written and dropped, the time a tick takes as a
 * histogram, database size, queries and their errors, its own CPU and memory) and, per
 * sampled target (labels pid, rank, local_rank, cmd, python): CPU seconds, RSS/PSS/USS/swap,
 * threads, samples by state (on CPU with or without the GIL, waiting). Everything comes from
 * counters in memory (sampler, writer, meter, API): a scrape never reads SQLite or the
 * targets' /proc, so it stays fast with many targets. No authentication: keep the default
 * loopback address, or put it behind what guards your other exporters.
 * Threads: the API's loop thread only.
 */
#ifndef PROBED_METRICS_H
#define PROBED_METRICS_H

#include <event2/event.h>
#include <stdatomic.h>

#include "errbuf.h"

#include "sample/meter.h"
#include "sample/sampler.h"
#include "sample/targets.h"
#include "store/writer.h"

/* What a scrape reports, owned by the daemon. */
struct metrics_sources {
    struct targets *reg;
    const struct sampler *sampler; /* its tick histogram */
    struct writer *writer;
    struct meter *meter;
    const struct exits *exits; /* NULL: none */
    struct catcher *catcher;   /* `probectl catch` */
    const char *db_path;
    const atomic_uint_fast64_t *requests, *queries, *query_errors;
    struct config *config; /* metrics_cmdline */
};

struct metrics;

int metrics_new(struct event_base *base, const struct metrics_sources *src, struct metrics **ret);
void metrics_free(struct metrics *m); /* NULL is a no-op */

/* Serves on @address ("host:port"), or stops serving for "off". On failure the previous
 * address stays served and @err says why. */
int metrics__listen(struct metrics *m, const char *address, struct errbuf *err);

#endif
