/* writer.c - see writer.h. */
#define _GNU_SOURCE
#include "store/writer.h"

#include <errno.h>

#include "clock.h"
#include "log.h"

#define RETAIN_EVERY 10      /* flushes between retention passes */
#define LOST_TARGETS_MAX 256 /* targets whose lost samples are told apart in one batch */
#define RETRY_MAX_NS (32 * 1000000000LL) /* the longest wait before the backlog is tried again */
#define MINUTE_NS 60000000000LL
/* A minute's blocks are merged (store__compact) once this long past its end: every write of
 * it is in by then (one a second), but for a backlog's, which stays as written. */
#define COMPACT_AFTER_NS 5000000000LL
/* At the start, the minutes this far back are merged too: the last run's, left as written. */
#define COMPACT_FROM_NS (10 * MINUTE_NS)
/* Each thread's CPU readings (one a second) are thinned to one a minute this long after. */
#define THIN_AFTER_NS (60 * MINUTE_NS)

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
        targets__add_lost(w->reg, acc[i].target_id, acc[i].n, acc[i].from_ns, acc[i].to_ns, why);
}

/* The backlog first (it holds what came before), then the new batch; a batch the database
 * will not take goes to the end of the backlog, or is lost past its bound. */
/* A sample is in the outbox a moment after its time was taken: one taken before a swap may
 * still land in the next half. Those older than this before a swap are in the half it took. */
#define SWAP_SLACK_NS 100000000LL

static void flush(struct writer *w)
{
    int64_t swapped_at = real_ns();
    struct ob_half *h = outbox__swap(w->ob);
    struct errbuf err;
    int64_t now = mono_ns();
    int r = 0;

    w->samples_dropped += h->n_dropped;
    w->usage_dropped += h->n_usage_dropped + h->n_gpu_dropped;
    if (w->backlog.h.n_samples || w->backlog.h.n_targets || w->backlog.h.n_ends ||
        w->backlog.h.n_crashes) {
        if (now < w->retry_ns) {
            r = -EAGAIN; /* not yet: the new batch joins the backlog */
        } else if ((r = store__write(w->store, &w->backlog.h, &err)) == 0) {
            log_msg(LOG_INFO, "the database takes samples again: %zu kept meanwhile written",
                    w->backlog.h.n_samples);
            w->flushes++;
            w->samples_written += w->backlog.h.n_samples;
            ob_backlog_clear(&w->backlog);
            w->backlog_samples = 0;
            w->retry_wait_ns = 0;
        }
    }
    if (r == 0 && (r = store__write(w->store, h, &err)) == 0) {
        w->flushes++;
        w->samples_written += h->n_samples;
        w->stored_to_ns = swapped_at - SWAP_SLACK_NS;
        return;
    }
    if (r != -EAGAIN && w->write_errors++ == 0)
        log_msg(LOG_ERR,
                "writing %zu samples to the database: %s (kept up to write_backlog, written "
                "when it takes them again; further failures are counted, not logged)",
                h->n_samples, err.msg);
    if (r != -EAGAIN) {
        w->retry_wait_ns = w->retry_wait_ns ? w->retry_wait_ns * 2 : 1000000000LL;
        if (w->retry_wait_ns > RETRY_MAX_NS)
            w->retry_wait_ns = RETRY_MAX_NS;
        w->retry_ns = now + w->retry_wait_ns;
    }
    if (ob_backlog_add(&w->backlog, h, (size_t)config_num(w->config, CFG_WRITE_BACKLOG)) == 0) {
        w->backlog_samples = w->backlog.h.n_samples;
        return;
    }
    count_lost(w, h, r == -EAGAIN ? "the database would not take the samples before" : err.msg);
    /* its definitions never reached the database: the sampler sends them again */
    outbox__forget_sent(w->ob);
}

static void retain(struct writer *w)
{
    struct errbuf err;
    int64_t keep_ns = config_num(w->config, CFG_RETENTION);
    int64_t before = keep_ns ? real_ns() - keep_ns : 0;
    int64_t n = store__retain(w->store, before, config_num(w->config, CFG_MAX_DB_SIZE), &err);

    if (n < 0)
        log_msg(LOG_WARN, "retention: %s", err.msg);
    else
        w->retained += (uint64_t)n;
    w->db_bytes = store__size(w->store);
}

/* compact() and thin() work through minutes one a pass, so that a start's catching up
 * (COMPACT_FROM_NS before the minute @age_ns ago) never holds the writes up for long: true
 * when the minute at *@next_ns ended @age_ns ago or more. */
static bool minute_due(int64_t *next_ns, int64_t now, int64_t age_ns)
{
    if (!*next_ns)
        *next_ns = (now - age_ns) / MINUTE_NS * MINUTE_NS - COMPACT_FROM_NS;
    return now >= *next_ns + MINUTE_NS + age_ns;
}

/* The next minute whose blocks were not merged yet, once it is over (and its last ticks in). */
static void compact(struct writer *w)
{
    struct errbuf err;
    int64_t now = real_ns(), n;

    if (!minute_due(&w->compacted_to_ns, now, COMPACT_AFTER_NS) || w->backlog.h.n_samples)
        return;
    n = store__compact(w->store, w->compacted_to_ns, w->compacted_to_ns + MINUTE_NS, &err);
    if (n < 0 && w->compact_errors++ == 0)
        log_msg(LOG_WARN, "%s (its blocks stay as written; further failures are counted)", err.msg);
    w->compacted_to_ns += MINUTE_NS; /* on, either way: a minute that fails stays readable */
    if (n > 0)
        w->blocks_merged += (uint64_t)n;
}

/* The next minute an hour old whose CPU readings were not thinned (store__thin). */
static void thin(struct writer *w)
{
    struct errbuf err;
    int64_t now = real_ns(), n;

    if (!minute_due(&w->thinned_to_ns, now, THIN_AFTER_NS))
        return;
    n = store__thin(w->store, w->thinned_to_ns, w->thinned_to_ns + MINUTE_NS, &err);
    if (n < 0 && w->thin_errors++ == 0)
        log_msg(LOG_WARN, "%s (they stay; further failures are counted)", err.msg);
    w->thinned_to_ns += MINUTE_NS;
    if (n > 0)
        w->readings_thinned += (uint64_t)n;
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
        w->db_cache_bytes = store__cache_bytes(w->store);
        if (n++ % RETAIN_EVERY == 0)
            retain(w);
        compact(w);
        thin(w);
        pthread_mutex_lock(&w->bg.lock);
    }
    pthread_mutex_unlock(&w->bg.lock);
    w->retry_ns = 0; /* one last try of the backlog too */
    flush(w);        /* what the sampler added while we stopped */
    if (w->backlog.h.n_samples)
        count_lost(w, &w->backlog.h, "the database would not take them before the daemon stopped");
    ob_backlog_clear(&w->backlog);
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
