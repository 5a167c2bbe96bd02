/*
 * wake_floor.c - the machine's floor under the sampler's CPU per tick: a thread that only
 * waits for its next tick, as the sampler does (a futex wait until an absolute
 * CLOCK_MONOTONIC time, timer slack 1 ns: probed/sample/targets.c), and does nothing else.
 * bench/daemon.py runs it beside each load.
 *
 * usage: wake_floor <rate_hz> <seconds>; prints {"wakes": N, "us_per_wake": X}: the thread's
 * CPU (its clock: the switches in and out of the wait included) over the wakes.
 */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double thread_cpu_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

int main(int argc, char **argv)
{
    uint32_t word = 0; /* nobody wakes it: only the timeout ends a wait */
    struct timespec due;
    long rate, n;
    double cpu0;

    if (argc != 3 || (rate = atol(argv[1])) <= 0 || rate > 1000000 || atof(argv[2]) <= 0)
        return fprintf(stderr, "usage: wake_floor <rate_hz> <seconds>\n"), 2;
    n = (long)(atof(argv[2]) * (double)rate);
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    clock_gettime(CLOCK_MONOTONIC, &due);
    cpu0 = thread_cpu_us();
    for (long i = 0; i < n; i++) {
        due.tv_nsec += 1000000000L / rate;
        while (due.tv_nsec >= 1000000000L) {
            due.tv_nsec -= 1000000000L;
            due.tv_sec++;
        }
        syscall(SYS_futex, &word, FUTEX_WAIT_BITSET_PRIVATE, 0, &due, NULL, FUTEX_BITSET_MATCH_ANY);
    }
    printf("{\"wakes\": %ld, \"us_per_wake\": %.2f}\n", n, (thread_cpu_us() - cpu0) / (double)n);
    return 0;
}
