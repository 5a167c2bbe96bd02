/* fetchdbg.c - see fetchdbg.h. */
#define _GNU_SOURCE
#include "fetchdbg.h"

#include <elfutils/debuginfod.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "err.h"

/* A build-id asked of the servers, and what they answered. */
struct known {
    uint8_t id[FETCHDBG_ID_MAX];
    size_t len;
    enum { QUEUED, FETCHING, LANDED, FAILED } state;
    int64_t answered_s; /* CLOCK_MONOTONIC, of a FAILED one: asked again after the retry time */
};

struct fetchdbg {
    pthread_mutex_t lock; /* everything below but the thread and the atomics */
    pthread_cond_t wake;
    pthread_t thread;
    atomic_bool stopping; /* also read by the client's progress callback, to cut a fetch */
    atomic_uint_fast64_t generation;
    struct known known[FETCHDBG_KNOWN];
    size_t n_known, evict_next;
    size_t queue[FETCHDBG_PENDING]; /* indices into known, oldest first from head */
    size_t head, n_queued;
    struct fetchdbg_stats stats;
};

static int64_t now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec;
}

static struct known *find(struct fetchdbg *f, const uint8_t *id, size_t len)
{
    for (size_t i = 0; i < f->n_known; i++)
        if (f->known[i].len == len && memcmp(f->known[i].id, id, len) == 0)
            return &f->known[i];
    return NULL;
}

/* A slot for a new build-id: a free one, else the next answered one (oldest first, round
 * robin); NULL when every one is queued or being fetched. */
static struct known *slot(struct fetchdbg *f)
{
    if (f->n_known < FETCHDBG_KNOWN)
        return &f->known[f->n_known++];
    for (size_t k = 0; k < FETCHDBG_KNOWN; k++) {
        struct known *s = &f->known[f->evict_next];
        f->evict_next = (f->evict_next + 1) % FETCHDBG_KNOWN;
        if (s->state == LANDED || s->state == FAILED)
            return s;
    }
    return NULL;
}

/* The client's progress callback: a nonzero return ends the transfer (fetchdbg_stop). */
static int progress(debuginfod_client *client, long done, long total)
{
    struct fetchdbg *f = debuginfod_get_user_data(client);

    (void)done, (void)total;
    return atomic_load(&f->stopping) ? 1 : 0;
}

static void *run(void *arg)
{
    struct fetchdbg *f = arg;
    debuginfod_client *client = debuginfod_begin();

    if (client) {
        debuginfod_set_user_data(client, f);
        debuginfod_set_progressfn(client, progress);
    }
    pthread_mutex_lock(&f->lock);
    for (;;) {
        while (!atomic_load(&f->stopping) && f->n_queued == 0)
            pthread_cond_wait(&f->wake, &f->lock);
        if (atomic_load(&f->stopping))
            break;
        struct known *k = &f->known[f->queue[f->head]];
        uint8_t id[FETCHDBG_ID_MAX];
        size_t len = k->len;
        char *path = NULL;
        int fd = -ENOMEM;

        f->head = (f->head + 1) % FETCHDBG_PENDING;
        f->n_queued--;
        memcpy(id, k->id, len);
        k->state = FETCHING; /* so never evicted meanwhile: k stays this build-id's */
        pthread_mutex_unlock(&f->lock);
        if (client) /* into the client's cache, by build-id (modfiles.c reads it there) */
            fd = debuginfod_find_debuginfo(client, id, (int)len, &path);
        if (fd >= 0)
            close(fd);
        free(path);
        pthread_mutex_lock(&f->lock);
        k->state = fd >= 0 ? LANDED : FAILED;
        k->answered_s = now_s();
        if (fd >= 0) {
            f->stats.fetched++;
            atomic_fetch_add(&f->generation, 1);
        } else {
            f->stats.failed++;
        }
    }
    pthread_mutex_unlock(&f->lock);
    if (client)
        debuginfod_end(client);
    return NULL;
}

int fetchdbg_start(struct fetchdbg **ret, struct pyf_err *reterr)
{
    const char *urls = getenv("DEBUGINFOD_URLS");
    struct fetchdbg *f;
    int r;

    if (!urls || !urls[0])
        return pyf_fail(reterr, PYF_INVALID, ENOENT, 0,
                        "debuginfod: DEBUGINFOD_URLS is not set: no server to ask");
    if (!(f = calloc(1, sizeof(*f))))
        return pyf_fail(reterr, PYF_INVALID, ENOMEM, 0, "debuginfod: out of memory");
    pthread_mutex_init(&f->lock, NULL);
    pthread_cond_init(&f->wake, NULL);
    r = pthread_create(&f->thread, NULL, run, f);
    if (r != 0) {
        pthread_cond_destroy(&f->wake);
        pthread_mutex_destroy(&f->lock);
        free(f);
        return pyf_fail(reterr, PYF_INVALID, r, 0, "debuginfod: starting its thread");
    }
    pthread_setname_np(f->thread, "probed-dbgfetch");
    *ret = f;
    return 0;
}

void fetchdbg_stop(struct fetchdbg *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&f->lock);
    atomic_store(&f->stopping, true);
    pthread_cond_signal(&f->wake);
    pthread_mutex_unlock(&f->lock);
    pthread_join(f->thread, NULL);
    pthread_cond_destroy(&f->wake);
    pthread_mutex_destroy(&f->lock);
    free(f);
}

void fetchdbg_request(struct fetchdbg *f, const uint8_t *id, size_t len)
{
    struct known *k;

    if (!f || len == 0 || len > FETCHDBG_ID_MAX)
        return;
    pthread_mutex_lock(&f->lock);
    k = find(f, id, len);
    if (k && (k->state != FAILED || now_s() - k->answered_s < FETCHDBG_RETRY_S))
        goto out; /* queued, fetching, landed, or failed lately */
    if (f->n_queued == FETCHDBG_PENDING || (!k && !(k = slot(f)))) {
        f->stats.dropped++; /* asked again when next wanted */
        goto out;
    }
    memcpy(k->id, id, len);
    k->len = len;
    k->state = QUEUED;
    f->queue[(f->head + f->n_queued++) % FETCHDBG_PENDING] = (size_t)(k - f->known);
    f->stats.requested++;
    pthread_cond_signal(&f->wake);
out:
    pthread_mutex_unlock(&f->lock);
}

bool fetchdbg_landed(struct fetchdbg *f, const uint8_t *id, size_t len)
{
    struct known *k;
    bool landed;

    if (!f)
        return false;
    pthread_mutex_lock(&f->lock);
    k = find(f, id, len);
    landed = k && k->state == LANDED;
    pthread_mutex_unlock(&f->lock);
    return landed;
}

uint64_t fetchdbg_generation(struct fetchdbg *f)
{
    return f ? atomic_load(&f->generation) : 0;
}

void fetchdbg_stats(struct fetchdbg *f, struct fetchdbg_stats *ret)
{
    *ret = (struct fetchdbg_stats){0};
    if (!f)
        return;
    pthread_mutex_lock(&f->lock);
    *ret = f->stats;
    pthread_mutex_unlock(&f->lock);
}
