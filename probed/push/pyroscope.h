/*
 * pyroscope.h - continuous push of every target's profile to a Pyroscope-compatible server
 * (Grafana Pyroscope, Alloy's pyroscope.receive_http): what fleets already run.
 *
 * While pyroscope_url is set, a thread wakes every pyroscope_interval and, for each target,
 * builds the pprof of its samples since its last push (query/flame.h's rows, query/pprof.h:
 * labelled thread, thread_id and pid per sample) and POSTs it to URL/ingest as Pyroscope's
 * HTTP API documents it: name APP.cpu{job=SCRIPT,host=HOST,pid=PID[,rank=R]}, from and until
 * in unix seconds, format=pprof, the profile a multipart field "profile". Windows are whole
 * seconds, ending 2 s ago or where the writer has stored every sample, the earlier. A push that
 * fails (no answer in 10 s, not 2xx) is not lost: the next pass pushes its window and the
 * new one together, up to PUSH_BACKLOG_S; past that the oldest seconds are dropped and
 * counted. Only http and https, no redirects followed.
 * Threads: its own (start/stop from main); pusher_json from any thread.
 * Memory: one target's profile at a time. Failure: counted and said in /v1/status.
 */
#ifndef PROBED_PYROSCOPE_H
#define PROBED_PYROSCOPE_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdint.h>

#include "common/bgthread.h"
#include "config.h"
#include "sample/targets.h"
#include "store/writer.h"

#define PUSH_LAG_S 2       /* a window ends this long ago: its samples are stored by then */
#define PUSH_BACKLOG_S 300 /* a failing server is caught up for this long, then seconds drop */
#define PUSH_TIMEOUT_S 10  /* one request */

struct push_slot {
    int64_t target_id;
    int64_t from_s; /* unix seconds: the next window's start */
};

struct pusher {
    struct config *config;
    const char *db_path;
    struct targets *reg;
    struct writer *writer; /* how far the samples are stored: a window ends there */
    struct bgthread bg;
    /* counters, read by the loop thread (status) */
    atomic_uint_fast64_t pushes, failures, dropped_s, samples;
    char last_error[256]; /* under bg.lock */
    /* the pusher thread's own */
    struct push_slot slots[TARGETS_MAX];
    size_t n_slots;
};

int pusher_start(struct pusher *p);
void pusher_stop(struct pusher *p);
/* {"url", "pushes", "failures", "dropped_seconds", "samples", "last_error"} for /v1/status. */
json_t *pusher_json(struct pusher *p);

#endif
