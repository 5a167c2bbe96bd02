/*
 * bench_sample.c - samples a bench/targets/deep.py process at a fixed rate and prints figures.
 *
 * usage: bench_sample <pid> <rate_hz|0> <seconds> <file> <base_line> <depth>
 * rate 0 samples back to back (the maximum sustained rate). A sample is what the daemon's
 * sampler does per tick: pyf_target__sample(), the threads and every thread's stack. The main
 * thread's stack is checked against the shape deep.py generates: lvl_k ... lvl_0 with each caller
 * at its call line. Prints one JSON object: cpu_us_per_sample is all the process's CPU over the run
 * divided by the samples (timer wakeups included), work_us_per_sample the CPU of the sampling calls
 * alone (thread CPU clock around them).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "pyframes.h"

#define THREADS_CAP 16
#define DEPTH_CAP 128

struct shape {
    const char *file;
    int base, depth;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* CPU time of this thread: brackets the sampling calls alone (not the sleeps, not our
 * checking of the result). */
static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* What one thread_cpu_s() pair adds to a measured interval (it is a syscall, not vDSO),
 * measured here so that it can be subtracted from the work per sample. */
static double timer_overhead_s(void)
{
    double sum = 0;
    for (int i = 0; i < 1000; i++) {
        double a = thread_cpu_s();
        sum += thread_cpu_s() - a;
    }
    return sum / 1000;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* True when @st is a stack deep.py really has: lvl_k innermost ... lvl_0, then its callers,
 * every non-innermost lvl_j at its call line, the innermost anywhere in its body. */
static bool consistent(const struct pyf_stack *st, const struct shape *sh)
{
    int k = -1;
    size_t i;

    for (i = 0; i < st->n_frames; i++) {
        const struct pyf_frame *f = &st->frames[i];
        int j;
        if (strcmp(f->file, sh->file) != 0 || sscanf(f->func, "lvl_%d", &j) != 1)
            break;
        if (k >= 0 && j != k - 1)
            return false;
        if (f->first_line != sh->base + 6 * j)
            return false;
        if (i > 0 && f->line != sh->base + 6 * j + 2)
            return false;
        if (i == 0 && (f->line < f->first_line || f->line > f->first_line + 3))
            return false;
        k = j;
    }
    return k == 0 && i < st->n_frames; /* reached lvl_0, and its caller (main) follows */
}

/* BENCH_SHOW=1: print the first inconsistent stacks to stderr, to see how they are torn. */
static void show(const struct pyf_stack *st)
{
    for (size_t i = 0; i < st->n_frames && i < 4; i++)
        fprintf(stderr, "%s:%d@%llx%s", st->frames[i].func, st->frames[i].line,
                (unsigned long long)st->frames[i].frame_raddr, i < 3 ? " < " : "\n");
}

int main(int argc, char **argv)
{
    int shown = 0;
    static struct pyf_thread threads[THREADS_CAP];
    static struct pyf_frame frames[THREADS_CAP][DEPTH_CAP];
    struct pyf_stack stacks[THREADS_CAP];
    unsigned long n = 0, ok = 0, torn = 0, good = 0, checked = 0;
    struct shape sh;
    struct pyf_target *t;
    struct pyf_err e;
    double rate, secs, t0, cpu0, next, cpu, work = 0, work0, overhead;
    pid_t pid;

    if (argc != 7)
        return fprintf(stderr, "usage: bench_sample <pid> <hz|0> <s> <file> <base> <depth>\n"), 2;
    pid = atoi(argv[1]);
    rate = atof(argv[2]);
    secs = atof(argv[3]);
    sh = (struct shape){argv[4], atoi(argv[5]), atoi(argv[6])};
    if (pyf_target_open(pid, &t, &e) < 0)
        return fprintf(stderr, "bench_sample: %s\n", e.msg), 1;
    for (int i = 0; i < THREADS_CAP; i++)
        stacks[i] = (struct pyf_stack){.frames = frames[i], .cap = DEPTH_CAP};
    overhead = timer_overhead_s();
    t0 = next = now_s();
    cpu0 = cpu_s();
    while (now_s() - t0 < secs) {
        size_t nt = 0;
        bool sample_ok;

        if (rate > 0) {
            struct timespec ts;
            next += 1.0 / rate;
            ts.tv_sec = (time_t)next;
            ts.tv_nsec = (long)((next - (double)ts.tv_sec) * 1e9);
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
        }
        n++;
        work0 = thread_cpu_s();
        if (pyf_target__sample(t, threads, stacks, THREADS_CAP, &nt, &e) < 0) {
            if (e.kind != PYF_TORN)
                return fprintf(stderr, "bench_sample: %s\n", e.msg), 1;
            nt = 0;
        }
        work += thread_cpu_s() - work0;
        sample_ok = nt > 0;
        for (size_t i = 0; i < nt; i++)
            sample_ok &= !stacks[i].torn;
        for (size_t i = 0; sample_ok && i < nt; i++) {
            if (threads[i].tid == pid) {
                bool c = consistent(&stacks[i], &sh);
                checked++;
                good += c;
                if (!c && getenv("BENCH_SHOW") &&
                    shown++ < (getenv("BENCH_SHOW_MAX") ? atoi(getenv("BENCH_SHOW_MAX")) : 8))
                    show(&stacks[i]);
            }
        }
        if (sample_ok)
            ok++;
        else
            torn++; /* other errors ended the run above */
    }
    secs = now_s() - t0;
    cpu = cpu_s() - cpu0;
    printf("{\"requested_hz\": %.0f, \"achieved_hz\": %.1f, \"samples\": %lu, \"torn\": %lu, "
           "\"cpu_us_per_sample\": %.2f, \"work_us_per_sample\": %.2f, \"consistent\": %lu, "
           "\"checked\": %lu, \"timer_overhead_us\": %.2f}\n",
           rate, (double)n / secs, n, torn, cpu * 1e6 / (double)(n ? n : 1),
           (work / (double)(n ? n : 1) - overhead) * 1e6, good, checked, overhead * 1e6);
    pyf_target_free(t);
    return 0;
}
