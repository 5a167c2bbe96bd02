/*
 * bgthread.h - a background thread that sleeps until a CLOCK_MONOTONIC deadline or a wake-up,
 * and stops on request: the daemon's writer and meter, probectl debug's keepalive.
 *
 * The thread function runs with nothing held; it takes @lock around bgthread_wait_until()
 * and reads @stopping under it. Threads: start/stop/wake from the owner's thread.
 */
#ifndef PROBED_BGTHREAD_H
#define PROBED_BGTHREAD_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct bgthread {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake; /* CLOCK_MONOTONIC */
    bool started, stopping;
};

/* Starts @fn(@arg) named @name (pthread_setname_np); -errno on failure. */
int bgthread_start(struct bgthread *b, const char *name, void *(*fn)(void *), void *arg);
/* Sets stopping, wakes the thread and joins it; a no-op when not started. */
void bgthread_stop(struct bgthread *b);
/* Wakes the thread now (a setting it reads changed). */
void bgthread_wake(struct bgthread *b);
/* With @lock held: sleeps until @deadline_ns (CLOCK_MONOTONIC) or a wake-up. */
void bgthread_wait_until(struct bgthread *b, int64_t deadline_ns);

#endif
