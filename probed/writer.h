/*
 * writer.h - the writer thread: once a second, the outbox's filled half into the store.
 *
 * Also enforces retention (age and size) every few seconds. A failed write (a full disk) is
 * logged once and counted: its samples in samples_dropped, and in each target's lost samples
 * and gap (sampler__add_lost, shown by list); the sampler is then told to send its
 * definitions again, since the ones in the lost batch never reached the database. The batch
 * itself is not kept for a retry yet.
 * Threads: writer_start/stop from main; the thread owns the store connection meanwhile.
 */
#ifndef PROBED_WRITER_H
#define PROBED_WRITER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "bgthread.h"
#include "config.h"
#include "outbox.h"
#include "sampler.h"
#include "store.h"

struct writer {
    int64_t flush_ns;      /* how often the outbox is written (at most 1 s) */
    struct config *config; /* retention and max_db_size, read at every pass */
    struct store *store;
    struct outbox *ob;
    struct sampler *sampler;
    struct bgthread bg;
    /* counters, read by the API thread */
    atomic_uint_fast64_t flushes, write_errors, samples_written, samples_dropped, retained;
    atomic_uint_fast64_t usage_dropped; /* memory/CPU rows the outbox had no room for */
    atomic_int_fast64_t db_bytes;
};

int writer_start(struct writer *w);
/* Stops the thread after a last flush. */
void writer_stop(struct writer *w);

#endif
