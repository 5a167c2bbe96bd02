/* bgthread.c - see bgthread.h. */
#define _GNU_SOURCE
#include "common/bgthread.h"

#include <time.h>

int bgthread_start(struct bgthread *b, const char *name, void *(*fn)(void *), void *arg)
{
    pthread_condattr_t ca;
    int r;

    pthread_mutex_init(&b->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&b->wake, &ca);
    pthread_condattr_destroy(&ca);
    b->stopping = false;
    r = pthread_create(&b->thread, NULL, fn, arg);
    if (r != 0) {
        pthread_cond_destroy(&b->wake);
        pthread_mutex_destroy(&b->lock);
        return -r;
    }
    pthread_setname_np(b->thread, name);
    b->started = true;
    return 0;
}

void bgthread_stop(struct bgthread *b)
{
    if (!b->started)
        return;
    pthread_mutex_lock(&b->lock);
    b->stopping = true;
    pthread_cond_signal(&b->wake);
    pthread_mutex_unlock(&b->lock);
    pthread_join(b->thread, NULL);
    pthread_cond_destroy(&b->wake);
    pthread_mutex_destroy(&b->lock);
    b->started = false;
}

void bgthread_wake(struct bgthread *b)
{
    if (!b->started)
        return;
    pthread_mutex_lock(&b->lock);
    pthread_cond_signal(&b->wake);
    pthread_mutex_unlock(&b->lock);
}

void bgthread_wait_until(struct bgthread *b, int64_t deadline_ns)
{
    struct timespec ts = {.tv_sec = deadline_ns / 1000000000LL,
                          .tv_nsec = deadline_ns % 1000000000LL};

    pthread_cond_timedwait(&b->wake, &b->lock, &ts);
}
