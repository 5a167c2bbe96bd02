/*
 * sampler.h - the sampling thread: every attached target, each at its own rate -> outbox.
 *
 * One thread walks the targets in order of their next due time, reads each one's threads and
 * stacks with one pyf_target__sample(), turns frames and stacks into content-hash ids and
 * appends samples (and definitions not sent before) to the outbox. It never allocates (but
 * once, when a target's threads fill its room: target__grow_threads()) and never touches the
 * database.
 * Threads: sampler_start/stop and the target functions from the API thread; the lock guards
 * the target list and every target's mutable fields (state, stats), and is held while one
 * target is sampled (tens of microseconds), never across I/O to the store or a client.
 * Ownership: a target added is the sampler's until sampler__remove() hands it back.
 */
#ifndef PROBED_SAMPLER_H
#define PROBED_SAMPLER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "native.h"
#include "outbox.h"
#include "target.h"
struct torch_drained; /* torchtrace.h */

#define SAMPLER_TARGETS_MAX 1024
#define SENT_SLOTS 16384  /* direct-mapped memory of definitions already sent */
#define SAMPLER_HIST_N 10 /* buckets of the time one target's tick takes (+Inf besides) */

/* Upper bounds of the tick-time histogram buckets, in microseconds (for /metrics). */
extern const double sampler_hist_bounds_us[SAMPLER_HIST_N];

struct sampler {
    pthread_t thread;
    bool started, stopping;
    pthread_mutex_t lock;
    pthread_cond_t wake; /* a target was added, or stop */
    struct outbox *ob;
    /* native function tables shared by the targets attached --native (libtorch's, once for all
     * the ranks of a job): native.h */
    struct pyf_symcache *symbols;
    struct target *targets[SAMPLER_TARGETS_MAX];
    size_t n_targets;
    atomic_bool forget_sent; /* the store lost a batch: send every definition again */
    atomic_int lock_waiters; /* other threads waiting for the lock: the sampler lets them in */
    /* how long each tick of one target took: cumulative-less buckets, summed by /metrics */
    atomic_uint_fast64_t tick_hist[SAMPLER_HIST_N + 1], tick_ns_sum;

    /* sampler thread only */
    int64_t sent_strings[SENT_SLOTS], sent_frames[SENT_SLOTS], sent_stacks[SENT_SLOTS];
    int64_t frame_ids[TARGET_DEPTH_MAX + NATIVE_DEPTH_MAX]; /* a stack's, Python and native */
    int64_t native_ids[NATIVE_DEPTH_MAX];
    bool native_eval[NATIVE_DEPTH_MAX];
    int32_t mixed_order[TARGET_DEPTH_MAX + NATIVE_DEPTH_MAX];
    struct pyf_stack instant; /* Python frames the eBPF sampler copied, decoded */
    struct pyf_frame instant_frames[TARGET_DEPTH_MAX];
};

int sampler_new(struct outbox *ob, struct sampler **ret);
int sampler_start(struct sampler *s);
/* Stops the thread; the targets stay, and so do the calls other threads make (the writer's
 * last flushes report lost samples to it): free it after them. */
void sampler_stop(struct sampler *s);
void sampler_free(struct sampler *s); /* stops the thread; frees the targets still held */

/* Takes @t, whose id the caller chose (and records its attach in the outbox unless
 * @t->resumed: a daemon restart picking up a target already in the store). -EEXIST: that process is
 * already sampled; -ENOSPC: too many targets. */
int sampler__add(struct sampler *s, struct target *t);
/* Stops sampling @pid and hands its target back to the caller (NULL: none). */
struct target *sampler__remove(struct sampler *s, pid_t pid);

/* The meter's latest reading of the target with id @target_id (if still listed). */
/* Adds a torch trace drain to @target_id's totals (torchtrace.h); @dropped: the target's
 * count so far; @tracing: whether the trace is still on. @d NULL: the drains stopped, only
 * @tracing is set. */
void sampler__add_torch(struct sampler *s, int64_t target_id, const struct torch_drained *d,
                        uint64_t dropped, bool tracing);
void sampler__set_usage(struct sampler *s, int64_t target_id, const struct proc_usage *u,
                        int64_t ts_ns);
/* @n samples of @target_id, taken from @from_ns to @to_ns, could not be written (@why): counted
 * in its stats (lost) and its gap, which a loss within a minute of the last one extends. */
void sampler__add_lost(struct sampler *s, int64_t target_id, uint64_t n, int64_t from_ns,
                       int64_t to_ns, const char *why);
/* config sample_rate changed: targets attached at the default rate now sample at @hz. */
void sampler__default_rate(struct sampler *s, uint32_t hz);

/* Calls @fn for each target under the lock (@fn must be quick and must not call back). */
void sampler__each(struct sampler *s, void (*fn)(const struct target *t, void *ctx), void *ctx);

/* CLOCK_MONOTONIC / CLOCK_REALTIME now, in nanoseconds. */
int64_t mono_ns(void);
int64_t real_ns(void);

#endif
