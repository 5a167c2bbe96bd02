/*
 * nsmap.h - a target's thread ids as its own pid namespace sees them, mapped to ours.
 *
 * A process in a container (another pid namespace) knows its threads by that namespace's
 * ids: CPython 3.11+ stores gettid() in each thread state, glibc stores it in struct
 * pthread (how <= 3.10 finds a thread's tid). /proc, perf and the eBPF sampler know the same
 * threads by the ids of the namespace we run in. The kernel gives both in the NSpid line of
 * /proc/PID/task/TID/status (ours first, the target's own last); this module keeps that map.
 *
 * Threads: belongs to one pyf_target, used by one thread at a time.
 * Memory:  the pairs grow with the thread count (bounded by the caller's thread cap).
 * Failure: a tid that cannot be mapped (the thread just ended, /proc unreadable) maps to 0,
 *          "no OS thread known", never to the unmapped number, which names another thread.
 */
#ifndef PYF_NSMAP_H
#define PYF_NSMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct nsmap_pair {
    pid_t ns, host;
};

struct nsmap {
    bool active;  /* the target lives in another pid namespace than we do */
    pid_t ns_pid; /* the target's pid in its own namespace (== pid when !active) */
    struct nsmap_pair *pairs;
    size_t n, cap;
    size_t n_threads;      /* as last told by nsmap_thread_count() */
    uint64_t refreshed_ns; /* CLOCK_MONOTONIC of the last scan of /proc/PID/task */
};

/* Finds out whether @pid lives in another pid namespace; never fails (inactive if unsure). */
void nsmap_init(struct nsmap *m, pid_t pid);
void nsmap_free(struct nsmap *m);
/* Our id of the thread the target calls @ns_tid; 0 when unknown. A miss rescans /proc, at
 * most every few milliseconds, so a thread that ended does not cost a scan per sample. */
pid_t nsmap_host_tid(struct nsmap *m, pid_t pid, pid_t ns_tid);
/* The number of threads the target lists now: when it changed, the next lookup rescans,
 * whatever the time since the last (a new thread may have an id an ended one had). */
void nsmap_thread_count(struct nsmap *m, size_t n);
/* The target's own ids of its threads (as nsmap_host_tid() takes them); at most @cap. */
size_t nsmap_ns_tids(struct nsmap *m, pid_t pid, pid_t *tids, size_t cap);

#endif
