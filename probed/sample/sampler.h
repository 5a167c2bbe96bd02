/*
 * sampler.h - the sampling thread: every listed target (targets.h), each at its own rate ->
 * outbox.
 *
 * One thread walks the registry's targets in order of their next due time, reads each one's
 * threads and stacks with one pyf_target__sample(), turns frames and stacks into content-hash
 * ids and appends samples (and definitions not sent before) to the outbox. It never touches
 * the database. Memory: its buffers are fixed (struct sampler, the targets' own from
 * target_new()); it allocates only in rare cases, between two ticks of a target: its threads
 * fill their room (target__grow_threads, at most 6 times per target), a thread is deeper than
 * TARGET_DEPTH_MAX (target__deepen, once per thread slot), a thread's tid is seen for the
 * first time (target.h known_tids, doubling) and libpyframes meets a new code object.
 * Threads: sampler_new/start/stop/free from main; the thread holds the registry's lock while it
 * samples one target, never across I/O to the store or a client.
 */
#ifndef PROBED_SAMPLER_H
#define PROBED_SAMPLER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "native/native.h"
#include "sample/outbox.h"
#include "sample/target.h"
#include "sample/targets.h"

#define SENT_SLOTS 16384  /* direct-mapped memory of definitions already sent */
#define SAMPLER_HIST_N 10 /* buckets of the time one target's tick takes (+Inf besides) */

/* Upper bounds of the tick-time histogram buckets, in microseconds (for /metrics). */
extern const double sampler_hist_bounds_us[SAMPLER_HIST_N];

struct sampler {
    pthread_t thread;
    bool started, stopping; /* under the registry's lock */
    struct targets *reg;
    struct outbox *ob;
    struct config *config; /* probed_threads, read each pass */
    /* how long each tick of one target took: cumulative-less buckets, summed by /metrics */
    atomic_uint_fast64_t tick_hist[SAMPLER_HIST_N + 1], tick_ns_sum;

    /* sampler thread only */
    int64_t real_offset_ns; /* CLOCK_REALTIME - CLOCK_MONOTONIC, as the samples are stamped */
    int64_t sent_strings[SENT_SLOTS], sent_frames[SENT_SLOTS], sent_stacks[SENT_SLOTS];
    int64_t
        frame_ids[TARGET_DEPTH_MAX + NATIVE_DEPTH_MAX + 1]; /* a stack's: Python, native, task */
    int64_t native_ids[NATIVE_DEPTH_MAX];
    bool native_eval[NATIVE_DEPTH_MAX];
    int32_t mixed_order[TARGET_DEPTH_MAX + NATIVE_DEPTH_MAX];
    struct pyf_stack instant; /* Python frames the eBPF sampler copied, decoded */
    struct pyf_frame instant_frames[TARGET_DEPTH_MAX];
    bool show_own; /* this pass: probed_threads = show (the stub's threads and code kept) */
};

int sampler_new(struct targets *reg, struct outbox *ob, struct config *config,
                struct sampler **ret);
int sampler_start(struct sampler *s);
/* Stops the thread; the registry and its targets stay (a restart resumes them). */
void sampler_stop(struct sampler *s);
void sampler_free(struct sampler *s); /* stops the thread; NULL is a no-op */

#endif
