/* writer.c - see writer.h. */
#define _GNU_SOURCE
#include "writer.h"

#include <errno.h>

#include "log.h"

#define RETAIN_EVERY 10 /* flushes between retention passes */

static void flush(struct writer *w)
{
    struct ob_half *h = outbox__swap(w->ob);
    struct store_err err;

    w->samples_dropped += h->n_dropped;
    w->usage_dropped += h->n_usage_dropped;
    if (store__write(w->store, h, &err) < 0) {
        if (w->write_errors++ == 0)
            log_msg(LOG_ERR,
                    "writing %zu samples to the database: %s (further failures are"
                    " counted, not logged)",
                    h->n_samples, err.msg);
        atomic_store(&w->sampler->forget_sent, true);
        return;
    }
    w->flushes++;
    w->samples_written += h->n_samples;
}

static void retain(struct writer *w)
{
    struct store_err err;
    int64_t keep_ns = config_num(w->config, CFG_RETENTION);
    int64_t before = keep_ns ? real_ns() - keep_ns : 0;
    int64_t n = store__retain(w->store, before, config_num(w->config, CFG_MAX_DB_SIZE), &err);

    if (n < 0)
        log_msg(LOG_WARN, "retention: %s", err.msg);
    else
        w->retained += (uint64_t)n;
    w->db_bytes = store__size(w->store);
}

static void *writer_main(void *arg)
{
    struct writer *w = arg;
    unsigned n = 0;

    pthread_mutex_lock(&w->bg.lock);
    while (!w->bg.stopping) {
        int64_t due = mono_ns() + w->flush_ns;

        while (!w->bg.stopping && mono_ns() < due)
            bgthread_wait_until(&w->bg, due);
        pthread_mutex_unlock(&w->bg.lock);
        flush(w);
        if (n++ % RETAIN_EVERY == 0)
            retain(w);
        pthread_mutex_lock(&w->bg.lock);
    }
    pthread_mutex_unlock(&w->bg.lock);
    flush(w); /* what the sampler added while we stopped */
    return NULL;
}

int writer_start(struct writer *w)
{
    return bgthread_start(&w->bg, "probed-writer", writer_main, w);
}

void writer_stop(struct writer *w)
{
    bgthread_stop(&w->bg);
}
