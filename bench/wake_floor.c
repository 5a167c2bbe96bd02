/*
 * wake_floor.c - the machine's floor under the sampler's CPU per tick: a thread that only
 * waits for its next tick, as the sampler does (pthread_cond_timedwait on CLOCK_MONOTONIC,
 * timer slack 1 ns), and does nothing else. bench/daemon.py runs it beside each load.
 *
 * usage: wake_floor <rate_hz> <seconds>; prints {"wakes": N, "us_per_wake": X}: the thread's
 * CPU (its clock: the switches in and out of the wait included) over the wakes.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <time.h>

static double thread_cpu_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

int main(int argc, char **argv)
{
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_condattr_t ca;
    pthread_cond_t wake;
    struct timespec due;
    long rate, n;
    double cpu0;

    if (argc != 3 || (rate = atol(argv[1])) <= 0 || rate > 1000000 || atof(argv[2]) <= 0)
        return fprintf(stderr, "usage: wake_floor <rate_hz> <seconds>\n"), 2;
    n = (long)(atof(argv[2]) * (double)rate);
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&wake, &ca);
    clock_gettime(CLOCK_MONOTONIC, &due);
    cpu0 = thread_cpu_us();
    pthread_mutex_lock(&lock);
    for (long i = 0; i < n; i++) {
        due.tv_nsec += 1000000000L / rate;
        while (due.tv_nsec >= 1000000000L) {
            due.tv_nsec -= 1000000000L;
            due.tv_sec++;
        }
        while (pthread_cond_timedwait(&wake, &lock, &due) == 0)
            ; /* nobody signals it: only the timeout ends a wait */
    }
    pthread_mutex_unlock(&lock);
    printf("{\"wakes\": %ld, \"us_per_wake\": %.2f}\n", n, (thread_cpu_us() - cpu0) / (double)n);
    return 0;
}
