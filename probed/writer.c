/* writer.c - see writer.h. */
#define _GNU_SOURCE
#include "writer.h"

#include <errno.h>
#include <time.h>

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

    pthread_mutex_lock(&w->lock);
    while (!w->stopping) {
        int64_t due = mono_ns() + w->flush_ns;
        struct timespec ts = {.tv_sec = due / 1000000000LL, .tv_nsec = due % 1000000000LL};

        while (!w->stopping && pthread_cond_timedwait(&w->wake, &w->lock, &ts) != ETIMEDOUT)
            ;
        pthread_mutex_unlock(&w->lock);
        flush(w);
        if (n++ % RETAIN_EVERY == 0)
            retain(w);
        pthread_mutex_lock(&w->lock);
    }
    pthread_mutex_unlock(&w->lock);
    flush(w); /* what the sampler added while we stopped */
    return NULL;
}

int writer_start(struct writer *w)
{
    pthread_condattr_t ca;
    int r;

    pthread_mutex_init(&w->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->wake, &ca);
    pthread_condattr_destroy(&ca);
    r = pthread_create(&w->thread, NULL, writer_main, w);
    if (r != 0)
        return -r;
    pthread_setname_np(w->thread, "probed-writer");
    w->started = true;
    return 0;
}

void writer_stop(struct writer *w)
{
    if (!w->started)
        return;
    pthread_mutex_lock(&w->lock);
    w->stopping = true;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->lock);
    w->started = false;
}
