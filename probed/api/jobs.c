/* jobs.c - see jobs.h. */
#define _GNU_SOURCE
#include "api/jobs.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "api/http.h"
#include "log.h"

struct jobs {
    struct event_base *base;
    pthread_mutex_t lock;
    int workers;       /* parallel jobs running */
    struct user_jobs { /* the parallel jobs of users who are not root */
        uid_t uid;
        int n; /* 0: a free entry */
    } user_jobs[JOBS_WORKERS_MAX];
    /* the serial lane */
    pthread_t serial_thread;
    bool serial_started, stopping;
    pthread_cond_t serial_wake;
    TAILQ_HEAD(, job) serial_queue;
    size_t serial_pending; /* queued or running, until replied */
};

static void job_free(struct job *j)
{
    if (j->free_kind)
        j->free_kind(j);
    json_decref(j->body);
    free(j->raw);
    free(j); /* struct job is first in its kind's */
}

/* With the lock: a worker for @sc's user within JOBS_WORKERS_MAX and JOBS_USER_MAX. -EBUSY:
 * all workers run; -EUSERS: this user's do. */
static int worker_claim(struct jobs *p, const struct query_scope *sc)
{
    struct user_jobs *free_entry = NULL, *mine = NULL;

    if (p->workers >= JOBS_WORKERS_MAX)
        return -EBUSY;
    for (int i = 0; !sc->root && i < JOBS_WORKERS_MAX; i++) {
        struct user_jobs *u = &p->user_jobs[i];
        if (u->n && u->uid == sc->uid)
            mine = u;
        else if (!u->n && !free_entry)
            free_entry = u;
    }
    if (!sc->root) {
        if (mine && mine->n >= JOBS_USER_MAX)
            return -EUSERS;
        if (!mine)
            *(mine = free_entry) = (struct user_jobs){.uid = sc->uid};
        mine->n++;
    }
    p->workers++;
    return 0;
}

/* With the lock. */
static void worker_release(struct jobs *p, const struct query_scope *sc)
{
    for (int i = 0; !sc->root && i < JOBS_WORKERS_MAX; i++)
        if (p->user_jobs[i].n && p->user_jobs[i].uid == sc->uid) {
            p->user_jobs[i].n--;
            break;
        }
    p->workers--;
}

/* Loop thread: the job ran; reply. */
static void job_done(evutil_socket_t fd, short what, void *arg)
{
    struct job *j = arg;
    struct jobs *p = j->pool;

    (void)fd, (void)what;
    if (j->done)
        j->done(j);
    if (!j->req) /* a job the daemon ran on its own */
        ;
    else if (j->raw)
        reply_raw(j->req, j->raw_type, j->raw, j->raw_len);
    else
        reply_json(j->req, j->status, json_incref(j->body));
    pthread_mutex_lock(&p->lock);
    if (j->lane == JOB_SERIAL)
        p->serial_pending--;
    else
        worker_release(p, &j->scope);
    pthread_mutex_unlock(&p->lock);
    job_free(j);
}

static void hand_back(struct job *j)
{
    if (event_base_once(j->pool->base, -1, EV_TIMEOUT, job_done, j, NULL) < 0)
        log_msg(LOG_ERR, "could not hand a reply back to the event loop");
}

static void *worker_main(void *arg)
{
    struct job *j = arg;

    j->run(j);
    hand_back(j);
    return NULL;
}

static void *serial_main(void *arg)
{
    struct jobs *p = arg;

    pthread_mutex_lock(&p->lock);
    for (;;) {
        struct job *j = TAILQ_FIRST(&p->serial_queue);

        if (!j && p->stopping)
            break;
        if (!j) {
            pthread_cond_wait(&p->serial_wake, &p->lock);
            continue;
        }
        TAILQ_REMOVE(&p->serial_queue, j, queue);
        pthread_mutex_unlock(&p->lock);
        j->run(j);
        hand_back(j);
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* Loop thread: @j never runs. */
static void refuse(struct job *j, int r)
{
    if (j->req && r == -EUSERS)
        reply_error(j->req, 429,
                    "uid %u has %d queries, flame graphs or evals running already;"
                    " try again when one is done",
                    (unsigned)j->scope.uid, JOBS_USER_MAX);
    else if (j->req && j->lane == JOB_SERIAL)
        reply_error(j->req, 503, "too many attaches and detaches waiting (%d); try again",
                    JOBS_SERIAL_MAX);
    else if (j->req && r == -EBUSY)
        reply_error(j->req, 503, "too many queries running (%d); try again", JOBS_WORKERS_MAX);
    else if (j->req)
        reply_error(j->req, 503, "could not start a worker: %s", strerror(-r));
    else if (r != -EBUSY)
        log_msg(LOG_WARN, "could not start a worker: %s", strerror(-r));
    if (j->dropped)
        j->dropped(j);
    job_free(j);
}

void jobs__start(struct jobs *p, struct job *j)
{
    pthread_attr_t attr;
    pthread_t th;
    int r = 0;

    j->pool = p;
    pthread_mutex_lock(&p->lock);
    if (j->lane == JOB_SERIAL) {
        if (p->serial_pending >= JOBS_SERIAL_MAX) {
            r = -EBUSY;
        } else {
            p->serial_pending++;
            TAILQ_INSERT_TAIL(&p->serial_queue, j, queue);
            pthread_cond_signal(&p->serial_wake);
        }
        pthread_mutex_unlock(&p->lock);
        if (r < 0)
            refuse(j, r);
        return;
    }
    r = worker_claim(p, &j->scope);
    pthread_mutex_unlock(&p->lock);
    if (r < 0) {
        refuse(j, r);
        return;
    }
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    r = -pthread_create(&th, &attr, worker_main, j);
    pthread_attr_destroy(&attr);
    if (r < 0) {
        pthread_mutex_lock(&p->lock);
        worker_release(p, &j->scope);
        pthread_mutex_unlock(&p->lock);
        refuse(j, r);
    }
}

int jobs_new(struct event_base *base, struct jobs **ret)
{
    struct jobs *p = calloc(1, sizeof(*p));
    int r;

    if (!p)
        return -ENOMEM;
    p->base = base;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->serial_wake, NULL);
    TAILQ_INIT(&p->serial_queue);
    r = -pthread_create(&p->serial_thread, NULL, serial_main, p);
    if (r < 0) {
        jobs_free(p);
        return r;
    }
    pthread_setname_np(p->serial_thread, "probed-attach");
    p->serial_started = true;
    *ret = p;
    return 0;
}

void jobs_free(struct jobs *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stopping = true;
    pthread_cond_signal(&p->serial_wake);
    while (p->workers > 0 || p->serial_pending > 0) { /* their replies need the loop */
        pthread_mutex_unlock(&p->lock);
        event_base_loop(p->base, EVLOOP_ONCE);
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    if (p->serial_started)
        pthread_join(p->serial_thread, NULL);
    pthread_cond_destroy(&p->serial_wake);
    pthread_mutex_destroy(&p->lock);
    free(p);
}
