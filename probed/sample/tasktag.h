/*
 * tasktag.h - which asyncio task each sampled thread runs, for the sampler: its samples then
 * carry the task (a frame of kind "task" just outside the task's coroutine, and the stack's
 * row in stack_tasks), so a flame graph and the samples say which task the time went to.
 *
 * asyncio records each loop's running task (pyf_target__current_tasks() before the tick's
 * stacks are read, pyf_target__running_tasks() after: a few reads, however many tasks wait). A
 * thread runs task X at a tick when X was its loop's running task both before and after the
 * read, with the same coroutine, and the stack holds that coroutine's frame (address and
 * code): X was pending and held its coroutine throughout, so no other coroutine can have had
 * that frame in between (a frame's address is reused once its coroutine
 * is gone: a code object's zombie frame on <= 3.10, the allocator's on 3.11+). The read before
 * is made only while coroutine frames were seen in the last TASKTAG_RECENT_NS: the first tick
 * of a burst after a quiet spell has no task (a loop waiting in select() runs none anyway).
 *
 * The label stored is the task's name, or, for the names asyncio makes up (Task-N), its
 * coroutine's qualified name, so a thousand tasks of one handler are one label; a target's
 * first TASKTAG_LABELS_MAX labels are kept, later new ones become the coroutine's name too
 * (the store's dictionary grows with distinct labels, never with tasks).
 * Threads: the sampler's. Memory: fixed, in the struct. Failure: a read that fails gives no
 * task at that tick (counted in reads_failed), never a wrong one.
 */
#ifndef PROBED_TASKTAG_H
#define PROBED_TASKTAG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pyframes.h"

#define TASKTAG_RUNNING_MAX 32          /* tasks running at once, one per event loop's thread */
#define TASKTAG_RECENT_NS 10000000000LL /* coroutine frames seen this recently: read before */
#define TASKTAG_LABELS_MAX 1024         /* distinct labels a target stores */
#define TASKTAG_LABEL_CHARS 96

struct tasktag_stats {
    uint64_t reads, reads_failed; /* of asyncio's running tasks */
    uint64_t tagged;              /* stacks given a task */
    uint64_t unproven;            /* stacks holding a running task's coroutine, not given it:
                                   * not that loop's task both before and after */
};

struct tasktag {
    struct pyf_current_task before[TASKTAG_RUNNING_MAX];
    struct pyf_running_task after[TASKTAG_RUNNING_MAX];
    size_t n_before, n_after;
    bool have_before, have_after;
    int64_t seen_ns; /* CLOCK_MONOTONIC when coroutine frames were last on a stack */
    uint64_t labels[TASKTAG_LABELS_MAX * 2]; /* hashes of the labels stored, open addressing */
    size_t n_labels;
    struct tasktag_stats stats;
};

/* Before the tick's stacks are read: the running tasks, when coroutine frames ran lately. */
void tasktag__before(struct tasktag *tt, struct pyf_target *t, const struct pyf_thread *threads,
                     size_t n_threads, int64_t mono_ns);
/* After: the running tasks again, when one of the tick's @stacks holds a coroutine frame (of
 * those read again: a thread asleep since keeps its stack's id, and its task, unless @all). */
void tasktag__after(struct tasktag *tt, struct pyf_target *t, const struct pyf_thread *threads,
                    const struct pyf_stack *stacks, size_t n, bool all, int64_t mono_ns);
/* The task stack @st ran this tick: its label into @label, and its coroutine's frame index in
 * *ret_frame. false: none (or none proven). */
bool tasktag__of(struct tasktag *tt, const struct pyf_stack *st, char *label, size_t size,
                 size_t *ret_frame);

#endif
