/*
 * nativesample - continuous native stack sampling of a process, without stopping it: perf
 * events copy each sampled thread's registers and top of stack (probed/native/perfstack.c), libdw
 * unwinds the copy (pyf_native__unwind_copy) and names the frames, through a cache of
 * names by address. Used by test_native.py and bench/native.py.
 *
 * usage: nativesample PID SECONDS [RATE_HZ [STACK_BYTES [--quiet]]]
 * With NATIVESAMPLE_UNTIL=N in the environment it stops as soon as it has N samples (SECONDS
 * is then the most it waits): a target on a busy machine may get little CPU time, and perf
 * samples CPU time.
 *
 * Prints one line per sample, "TID<TAB>name;name;..." innermost first (an address without
 * a symbol as object+0xOFFSET), unless --quiet; then one JSON line of figures: samples, lost,
 * threads, unwind_us (mean per sample), cpu_us (this process's CPU per sample once warm:
 * draining, unwinding, naming; the first second, which loads each object's symbols and CFI,
 * is left out), frames (mean), complete (share of stacks unwound to the thread's first
 * frame: _start, clone, start_thread), cache_hits and lookups (naming).
 */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "native/perfstack.h"
#include "pyframes_native.h"

#define CACHE_SLOTS 4096
#define QUEUE_MAX 4096 /* samples between two drains */

struct name_slot {
    uint64_t pc;
    char *name;
};

struct run {
    struct pyf_native *nat;
    bool quiet;
    uint64_t samples, frames, complete, unwind_ns, hits, lookups;
    struct name_slot cache[CACHE_SLOTS];
    struct queued *queue[QUEUE_MAX];
    size_t n_queue;
};

static uint64_t clock_ns(clockid_t clock)
{
    struct timespec ts;

    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t now_ns(void)
{
    return clock_ns(CLOCK_MONOTONIC);
}

/* The name of @pc, through the cache (a miss costs libdw a symbol-table scan). */
static const char *name_of(struct run *r, uint64_t pc, bool innermost)
{
    struct name_slot *s = &r->cache[(pc >> 2) % CACHE_SLOTS];
    struct pyf_native_frame f;
    char buf[512];

    r->lookups++;
    if (s->name && s->pc == pc) {
        r->hits++;
        return s->name;
    }
    pyf_native__symbol(r->nat, pc, innermost, &f);
    if (f.function)
        snprintf(buf, sizeof(buf), "%s", f.function);
    else
        snprintf(buf, sizeof(buf), "%s+0x%llx", f.object ? f.object : "anon",
                 (unsigned long long)f.object_offset);
    free(s->name);
    s->pc = pc;
    s->name = strdup(buf);
    return s->name ? s->name : "?";
}

static bool is_first_frame(const char *name)
{
    return strcmp(name, "_start") == 0 || strncmp(name, "clone", 5) == 0 ||
           strcmp(name, "start_thread") == 0 || strncmp(name, "__libc_start", 12) == 0;
}

/* A sample copied out of its ring: the rings are emptied first, so that the unwinding that
 * follows (slow while each object's CFI loads) never lets a ring overflow. */
struct queued {
    struct pyf_stack_copy copy;
    uint8_t stack[];
};

static void queue_sample(void *ctx, const struct pyf_stack_copy *copy, uint64_t time_ns)
{
    struct run *r = ctx;
    struct queued *q;

    (void)time_ns;
    if (r->n_queue == QUEUE_MAX || !(q = malloc(sizeof(*q) + copy->size)))
        return;
    q->copy = *copy;
    memcpy(q->stack, copy->stack, copy->size);
    q->copy.stack = q->stack;
    r->queue[r->n_queue++] = q;
}

static void on_sample(struct run *r, const struct pyf_stack_copy *copy)
{
    uint64_t pcs[PYF_NATIVE_DEPTH_MAX], t0 = now_ns();
    size_t n = 0;
    bool truncated = false, complete = false;
    struct pyf_err e;

    if (pyf_native__unwind_copy(r->nat, copy, pcs, PYF_NATIVE_DEPTH_MAX, &n, &truncated, &e) < 0)
        n = 0;
    r->unwind_ns += now_ns() - t0;
    r->samples++;
    r->frames += n;
    if (!r->quiet)
        printf("%d\t", (int)copy->tid);
    for (size_t i = 0; i < n; i++) {
        const char *name = name_of(r, pcs[i], i == 0);
        complete = is_first_frame(name);
        if (!r->quiet)
            printf("%s%s", i ? ";" : "", name);
    }
    if (!r->quiet)
        printf("\n");
    r->complete += complete;
}

/* Empties every ring into the queue, then unwinds and names what was queued, emptying the
 * rings again every few milliseconds meanwhile. */
static void drain(struct run *r, struct perfstack *ps, uint64_t *lost)
{
    uint64_t lost_now = 0, last = now_ns();

    perfstack__drain(ps, queue_sample, r, &lost_now);
    *lost += lost_now;
    for (size_t i = 0; i < r->n_queue; i++) {
        on_sample(r, &r->queue[i]->copy);
        free(r->queue[i]);
        if (now_ns() - last > 5000000) {
            perfstack__drain(ps, queue_sample, r, &lost_now);
            *lost += lost_now;
            last = now_ns();
        }
    }
    r->n_queue = 0;
}

int main(int argc, char **argv)
{
    struct run *r = calloc(1, sizeof(*r));
    struct perfstack *ps = NULL;
    struct pyf_err e;
    struct errbuf err;
    uint64_t lost = 0, start, end, warm_cpu = 0, warm_samples = 0, until = 0;
    pid_t pid;

    if (argc < 3 || !r) {
        fprintf(stderr, "usage: nativesample PID SECONDS [RATE_HZ [STACK_BYTES [--quiet]]]\n");
        return 2;
    }
    pid = atoi(argv[1]);
    r->quiet = argc > 5 && strcmp(argv[5], "--quiet") == 0;
    if (getenv("NATIVESAMPLE_UNTIL"))
        until = strtoull(getenv("NATIVESAMPLE_UNTIL"), NULL, 10);
    if (pyf_native_open(pid, NULL, &r->nat, &e) < 0) {
        fprintf(stderr, "nativesample: %s\n", e.msg);
        return 1;
    }
    pyf_native__prepare(r->nat);
    /* 256 KiB rings: room for a first unwind that is slow (ASan, a busy machine) */
    if (perfstack_open(pid, argc > 3 ? (uint32_t)atoi(argv[3]) : 100,
                       argc > 4 ? (uint32_t)atoi(argv[4]) : 16384, 64, &ps, &err) < 0) {
        fprintf(stderr, "nativesample: %s\n", err.msg);
        return 1;
    }
    start = now_ns();
    end = start + (uint64_t)(atof(argv[2]) * 1e9);
    while (now_ns() < end && (!until || r->samples < until)) {
        usleep(10 * 1000);
        if (!warm_cpu && now_ns() - start > 1000000000u) {
            warm_cpu = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
            warm_samples = r->samples;
        }
        drain(r, ps, &lost);
        if (perfstack__refresh(ps, &err) < 0)
            break; /* the process is gone */
    }
    drain(r, ps, &lost);
    printf("{\"samples\": %llu, \"lost\": %llu, \"threads\": %zu, \"unwind_us\": %.2f, "
           "\"cpu_us\": %.2f, \"frames\": %.1f, \"complete\": %.3f, \"cache_hits\": %llu, "
           "\"lookups\": %llu}\n",
           (unsigned long long)r->samples, (unsigned long long)lost, perfstack__threads(ps),
           r->samples ? (double)r->unwind_ns / 1e3 / (double)r->samples : 0.0,
           r->samples > warm_samples && warm_cpu
               ? (double)(clock_ns(CLOCK_PROCESS_CPUTIME_ID) - warm_cpu) / 1e3 /
                     (double)(r->samples - warm_samples)
               : 0.0,
           r->samples ? (double)r->frames / (double)r->samples : 0.0,
           r->samples ? (double)r->complete / (double)r->samples : 0.0, (unsigned long long)r->hits,
           (unsigned long long)r->lookups);
    perfstack_free(ps);
    pyf_native_free(r->nat);
    for (size_t i = 0; i < CACHE_SLOTS; i++)
        free(r->cache[i].name);
    free(r);
    return 0;
}
