/*
 * writer.h - the writer thread: once a second, the outbox's filled half into the store.
 *
 * Also enforces retention (age and size) every few seconds, and merges each minute's sample
 * blocks into one per thread once it is over (store__compact). A batch the database will not
 * take (a full disk) is logged once and kept in the backlog (outbox.h), up to write_backlog
 * bytes, and written again, with all that follows, when it takes them (tried after 1, 2, 4 ...
 * 32 s). Past the bound a batch is lost and counted: its samples in samples_dropped, and in
 * each target's lost samples and gap (targets__add_lost, shown by list).
 * Threads: writer_start/stop from main; the thread owns the store connection meanwhile.
 */
#ifndef PROBED_WRITER_H
#define PROBED_WRITER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/bgthread.h"
#include "config.h"
#include "sample/outbox.h"
#include "store/store.h"
#include "sample/targets.h"

struct writer {
    int64_t flush_ns;      /* how often the outbox is written (at most 1 s) */
    struct config *config; /* retention and max_db_size, read at every pass */
    struct store *store;
    struct outbox *ob;
    struct targets *reg; /* told of the samples lost */
    struct bgthread bg;
    /* counters, read by the loop thread (status, /metrics) */
    atomic_uint_fast64_t flushes, write_errors, samples_written, samples_dropped, retained;
    atomic_uint_fast64_t usage_dropped;   /* memory/CPU/GPU rows the outbox had no room for */
    atomic_uint_fast64_t backlog_samples; /* kept, waiting for the database to take them */
    /* CLOCK_REALTIME: every sample taken before it is in the database (0: none written yet);
     * what a reader of whole windows (push/pyroscope.h) waits for */
    atomic_int_fast64_t stored_to_ns;
    struct ob_backlog backlog;
    int64_t retry_ns; /* CLOCK_MONOTONIC of the next try of the backlog */
    int64_t retry_wait_ns;
    int64_t compacted_to_ns; /* CLOCK_REALTIME: the minutes before it were merged */
    uint64_t compact_errors;
    atomic_uint_fast64_t blocks_merged;
    int64_t thinned_to_ns; /* CLOCK_REALTIME: the CPU readings before it were thinned */
    uint64_t thin_errors;
    atomic_uint_fast64_t readings_thinned;
    atomic_int_fast64_t db_bytes;
    atomic_int_fast64_t db_cache_bytes; /* store__cache_bytes, after each flush */
};

int writer_start(struct writer *w);
/* Stops the thread after a last flush. */
void writer_stop(struct writer *w);

#endif
