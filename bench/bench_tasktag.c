/*
 * bench_tasktag.c - what giving each sample its asyncio task (sample/tasktag.h) adds to a tick.
 *
 * usage: bench_tasktag <pid> <ticks> <rounds>
 * Rounds alternate between the sampler's tick without tasks (pyf_target__sample() alone: the
 * baseline) and with them (tasktag__before(), the sample, tasktag__after() and tasktag__of()
 * on every stack, as sampler.c does), @ticks back to back each, on the same process in the same
 * run. Prints one JSON object: the median of each mode's per-tick CPU time (this thread's
 * clock), the ratio, the noise floor (the baseline rounds' spread over their median) and the
 * share of stacks given a task. Run on bench/targets or tests/targets/taskspin.py.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pyframes.h"
#include "sample/tasktag.h"

#define THREADS_CAP 16
#define DEPTH_CAP 256
#define ROUNDS_MAX 64

static double cpu_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int64_t mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    static struct pyf_frame frames[THREADS_CAP][DEPTH_CAP];
    static struct tasktag tt;
    struct pyf_thread threads[THREADS_CAP];
    struct pyf_stack stacks[THREADS_CAP];
    double base[ROUNDS_MAX], with[ROUNDS_MAX];
    uint64_t stacks_seen = 0, tagged = 0;
    struct pyf_target *t = NULL;
    struct pyf_err e;
    int pid, ticks, rounds;
    size_t n = 0;

    if (argc != 4 || (pid = atoi(argv[1])) <= 0 || (ticks = atoi(argv[2])) <= 0 ||
        (rounds = atoi(argv[3])) <= 0 || rounds > ROUNDS_MAX) {
        fprintf(stderr, "usage: bench_tasktag <pid> <ticks> <rounds (at most %d)>\n", ROUNDS_MAX);
        return 2;
    }
    if (pyf_target_open(pid, &t, &e) < 0) {
        fprintf(stderr, "bench_tasktag: %s\n", e.msg);
        return 1;
    }
    memset(stacks, 0, sizeof(stacks));
    for (int i = 0; i < THREADS_CAP; i++)
        stacks[i] = (struct pyf_stack){.frames = frames[i], .cap = DEPTH_CAP};
    for (int r = 0; r < rounds * 2; r++) {
        bool tasks = r % 2 == 1;
        double t0 = cpu_us();

        for (int k = 0; k < ticks; k++) {
            char label[TASKTAG_LABEL_CHARS + 1];
            size_t at;

            if (tasks)
                tasktag__before(&tt, t, threads, n, mono_ns());
            if (pyf_target__sample(t, threads, stacks, THREADS_CAP, &n, &e) < 0) {
                n = 0;
                continue;
            }
            if (!tasks)
                continue;
            tasktag__after(&tt, t, threads, stacks, n, false, mono_ns());
            for (size_t i = 0; i < n; i++) {
                stacks_seen++;
                tagged += tasktag__of(&tt, &stacks[i], label, sizeof(label), &at);
            }
        }
        (tasks ? with : base)[r / 2] = (cpu_us() - t0) / ticks;
    }
    qsort(base, (size_t)rounds, sizeof(double), cmp_double);
    qsort(with, (size_t)rounds, sizeof(double), cmp_double);
    printf("{\"pid\": %d, \"ticks\": %d, \"rounds\": %d, \"baseline_us\": %.2f,"
           " \"with_tasks_us\": %.2f, \"ratio\": %.3f, \"noise\": %.3f, \"tagged_share\": %.3f,"
           " \"reads\": %llu, \"unproven\": %llu}\n",
           pid, ticks, rounds, base[rounds / 2], with[rounds / 2],
           with[rounds / 2] / base[rounds / 2], (base[rounds - 1] - base[0]) / base[rounds / 2],
           stacks_seen ? (double)tagged / (double)stacks_seen : 0.0,
           (unsigned long long)tt.stats.reads, (unsigned long long)tt.stats.unproven);
    pyf_target_free(t);
    return 0;
}
