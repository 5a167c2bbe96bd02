/* writer.c - see writer.h. */
#define _GNU_SOURCE
#include "writer.h"

#include <errno.h>

#include "log.h"

#define RETAIN_EVERY 10      /* flushes between retention passes */
#define LOST_TARGETS_MAX 256 /* targets whose lost samples are told apart in one batch */

/* A batch the database would not take is lost: counted where users look (the dropped total,
 * each target's lost samples and its gap in list), never silently. */
static void count_lost(struct writer *w, const struct ob_half *h, const char *why)
{
    struct lost {
        int64_t target_id, from_ns, to_ns;
        uint64_t n;
    } acc[LOST_TARGETS_MAX];
    size_t n_acc = 0, last = 0;

    w->samples_dropped += h->n_samples;
    for (size_t i = 0; i < h->n_samples; i++) {
        const struct ob_sample *smp = &h->samples[i];
        if (!n_acc || acc[last].target_id != smp->target_id) { /* a tick's samples go together */
            for (last = 0; last < n_acc && acc[last].target_id != smp->target_id; last++)
                ;
            if (last == n_acc && n_acc == LOST_TARGETS_MAX) {
                last = 0; /* more targets than that: the rest count in the total only */
                continue;
            }
            if (last == n_acc)
                acc[n_acc++] = (struct lost){smp->target_id, smp->ts_ns, smp->ts_ns, 0};
        }
        acc[last].from_ns = smp->ts_ns < acc[last].from_ns ? smp->ts_ns : acc[last].from_ns;
        acc[last].to_ns = smp->ts_ns > acc[last].to_ns ? smp->ts_ns : acc[last].to_ns;
        acc[last].n++;
    }
    for (size_t i = 0; i < n_acc; i++)
        sampler__add_lost(w->sampler, acc[i].target_id, acc[i].n, acc[i].from_ns, acc[i].to_ns,
                          why);
}

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
        count_lost(w, h, err.msg);
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
