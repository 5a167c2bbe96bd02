/*
 * targets.h - the registry of attached processes: who is sampled, how, and their totals.
 *
 * The registry owns every struct target (target.h) from its attach until it is detached, or
 * until an ended one is dropped to make room. targets__attach() is the one way a process
 * becomes a target: an API attach, a descendant found for --children (follow.h) and a target
 * resumed after a daemon restart all go through it. Other threads never hold a target: they
 * ask for copies (targets__copy, targets__keys) and change totals through the functions below.
 *
 * Threads: any. The lock guards the list and every listed target's mutable fields (state,
 * stats, totals). The sampler thread (sampler.h) holds it while it samples one target (tens
 * of microseconds) and lets waiting threads in between two targets (targets__let_others_in),
 * so a scrape, a list or an attach never waits behind a burst of ticks.
 * Lock order: this lock, then the outbox's (outbox.h); never the other way round.
 * Memory: a target's buffers are sized by target_new() outside the lock; targets_new() sizes
 * the list (TARGETS_MAX slots) once.
 * Failure: -errno with the reason for a person in a caller-owned struct pyf_err.
 */
#ifndef PROBED_TARGETS_H
#define PROBED_TARGETS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "native/native.h"
#include "sample/outbox.h"
#include "sample/target.h"

#define TARGETS_MAX 1024 /* listed targets, ended ones included (those make room first) */

struct targets {
    pthread_mutex_t lock;
    /* the sampler sleeps on it (a futex): a target added, a rate changed, stop bump it */
    _Atomic uint32_t wake_seq;
    atomic_int lock_waiters; /* threads other than the sampler waiting for the lock */
    struct outbox *ob;       /* attach and end records */
    /* native function tables shared by the targets attached --native (libtorch's, once for all
     * the ranks of a job): native.h */
    struct pyf_symcache *symbols;
    struct target *list[TARGETS_MAX]; /* in attach order */
    size_t n;
    int64_t next_id; /* the targets.id of the next attach */
};

/* How to attach a process. */
struct attach_opts {
    uint32_t rate_hz;
    bool rate_is_default;  /* no rate asked: follows config sample_rate */
    bool follow_children;  /* attach --children */
    bool native;           /* attach --native: the eBPF sampler, else perf */
    bool native_perf_only; /* attach --native=perf */
    bool nccl;             /* attach --nccl: its NCCL calls recorded whatever nccl_calls says */
    int64_t duration_ns;   /* detached after this long; 0: never */
    /* a daemon restart picking up a target the store lists as sampled: its row and id exist */
    int64_t resume_id;                                 /* 0: a new attach */
    bool allocation_tracking, torch_tracing, catching; /* resumed with these on */
};

/* A target as others see it: a copy taken under the lock. */
struct target_info {
    int64_t id;
    pid_t pid;
    uid_t uid;
    int64_t start_time;
    char cmdline[512];
    char py_version[32];
    int rank, local_rank, world_size; /* -1: not set */
    uint32_t rate_hz;
    bool follow_children, native_wanted, native_perf_only, nccl_wanted;
    bool allocation_tracking, torch_tracing, catching; /* resumed with these on */
    int64_t attached_ns;                               /* CLOCK_REALTIME */
    int64_t ended_ns;                                  /* CLOCK_REALTIME; 0 while sampled */
    enum target_state state;
    char end_reason[128];
    struct target_stats stats;
    struct tasktag_stats task_stats; /* samples given their asyncio task (tasktag.h) */
    struct target_gap gap;
    struct proc_usage usage;
    int64_t usage_ns;            /* 0: no reading yet */
    int64_t gpu_bytes;           /* GPU memory (NVML) at the latest reading; -1: none */
    int64_t main_stack_since_ns; /* the main thread's stack is this one since (0: not yet) */
    struct target_torch torch;
    size_t threads_room;
    const char *mode; /* target_mode(): static */
    bool has_native;  /* the kernel's native stacks are being merged: the fields below */
    char native_backend[8];
    char native_ebpf_error[512]; /* why perf, not the eBPF sampler */
    struct native_stats native_stats;
    char native_error[512]; /* why native_wanted is not met */
};

/* The few fields a pass over every target needs, copied without the rest. */
struct target_key {
    int64_t id, start_time;
    pid_t pid;
    uid_t uid;
    enum target_state state;
    int64_t ended_ns; /* CLOCK_REALTIME it ended; 0 while sampling */
    uint32_t rate_hz;
    bool follow_children, native_wanted, native_perf_only;
    bool nccl_wanted; /* attach --nccl */
};

/* Which targets a copy holds. */
struct targets_filter {
    bool all_users; /* false: only those of uid */
    uid_t uid;
    pid_t pid;           /* 0: any */
    bool sampling_only;  /* only those being sampled now */
    bool following_only; /* only those attached --children */
    bool nccl_only;      /* only those attached --nccl */
};

/* What the torch trace's drain of a target adds to its totals (torchtrace.h). */
struct torch_totals {
    uint64_t steps;
    double step_seconds;
    uint64_t ddp_steps;                           /* DDP iterations its logger timed */
    double ddp_compute_seconds, ddp_wait_seconds; /* their forward + backward; exposed comm */
    bool has_memory, has_reserved;
    double allocated_mb, reserved_mb;
    bool comm; /* collectives traced: the rest as torch_drained's (torchtrace.h) */
    uint64_t comm_calls, comm_bytes;
    double comm_seconds;
    bool has_comm_seq;
    int64_t comm_seq, comm_in_flight_since_ns;
};

int targets_new(struct outbox *ob, int64_t next_id, struct targets **ret);
/* Frees every target still listed: after the sampler stopped and the writer's last report. */
void targets_free(struct targets *reg); /* NULL is a no-op */

/* Opens @pid and lists it for sampling (its attach recorded in the store unless resumed);
 * *ret_info (may be NULL) is the new target. -EEXIST: it is sampled already; -ENOSPC: too
 * many targets; else target_new()'s error. The open runs outside the lock: a slow one (a torch
 * process, the eBPF program's load) delays no other thread. */
int targets__attach(struct targets *reg, pid_t pid, const struct attach_opts *o,
                    struct target_info *ret_info, struct pyf_err *reterr);
/* The second half of targets__attach(): lists @t, opened (taken on success). Unit tests use it
 * with targets made by hand. -EEXIST, -ENOSPC. */
int targets__add(struct targets *reg, struct target *t, const struct attach_opts *o,
                 struct target_info *ret_info);
/* Switches the sampled @pid to @o's native mode (attach --native on an attached pid: perf or
 * the eBPF sampler, or Python frames alone), keeping its timeline (the same targets row, its
 * native column rewritten). The native sampler opens outside the lock, from copies; the old one
 * is freed outside it. 0: switched (a native open that failed leaves Python frames, its
 * native_error says why); 1: it was in that mode already; -ENOENT: not sampled (or it ended
 * meanwhile); -EINVAL: its rate is above what native stacks allow. *ret_info: the target. */
/* Turns the recording of the sampled @pid's NCCL calls (attach --nccl, --no-nccl) to @want,
 * its targets row rewritten (a restart resumes it). 0: changed; 1: it was so already;
 * -ENOENT: not sampled. *ret_info: the target. */
int targets__set_nccl(struct targets *reg, pid_t pid, bool want, struct target_info *ret_info);
int targets__set_native(struct targets *reg, pid_t pid, const struct attach_opts *o,
                        struct target_info *ret_info, struct pyf_err *reterr);
/* Stops sampling @pid, if @f lets its caller see it, and forgets it; *ret_info: what it was.
 * -ENOENT: no such target in @f. */
int targets__detach(struct targets *reg, pid_t pid, const struct targets_filter *f,
                    struct target_info *ret_info);

/* Copies of the targets @f selects, in attach order, at most @cap; returns how many there are. */
size_t targets__copy(struct targets *reg, const struct targets_filter *f, struct target_info *out,
                     size_t cap);
size_t targets__keys(struct targets *reg, const struct targets_filter *f, struct target_key *out,
                     size_t cap);
/* The last attach of @pid (a sampling one if @sampling_only). -ENOENT: none. */
int targets__find(struct targets *reg, pid_t pid, bool sampling_only, struct target_key *ret);

/* Totals others keep for a target, by its id (a target no longer listed: ignored). */
void targets__set_usage(struct targets *reg, int64_t id, const struct proc_usage *u, int64_t ts_ns);
/* The meter: @id's memory on every GPU now (-1: the GPUs could not be read). */
void targets__set_gpu(struct targets *reg, int64_t id, int64_t bytes);
/* @n samples taken from @from_ns to @to_ns could not be written (@why): counted in its stats
 * (lost) and its gap, which a loss within a minute of the last one extends. */
void targets__add_lost(struct targets *reg, int64_t id, uint64_t n, int64_t from_ns, int64_t to_ns,
                       const char *why);
/* A torch trace drain: @d added (NULL: the drains stopped), @dropped the target's count so far,
 * @tracing whether the trace is still on. */
void targets__add_torch(struct targets *reg, int64_t id, const struct torch_totals *d,
                        uint64_t dropped, bool tracing);
/* config sample_rate changed: the targets attached at the default rate now sample at @hz. */
void targets__default_rate(struct targets *reg, uint32_t hz);

/* The lock, for every thread but the sampler's: counted, so that the sampler lets it in. */
void targets__lock(struct targets *reg);
void targets__unlock(struct targets *reg);
/* Sampler thread, holding the lock between two targets: lets waiting threads go first. */
/* The sampler, holding the lock: lets it go until @when_ns (CLOCK_MONOTONIC) or a wake,
 * whichever comes first, and takes it back. */
void targets__sleep_until(struct targets *reg, int64_t when_ns);
/* Holding the lock: ends the sampler's sleep (its list, a rate or its stop changed). */
void targets__wake(struct targets *reg);
void targets__let_others_in(struct targets *reg);
/* With the lock: @t ended (recorded in the store, its buffers freed, no longer sampled). */
void targets__end(struct targets *reg, struct target *t, enum target_state state,
                  const char *reason);

#endif
