// SPDX-License-Identifier: GPL-2.0
/*
 * runboard.bpf.c - the run-state board: at each context switch of a thread the daemon watches
 * (the sched_switch tracepoint, BTF-typed), counts the switch and notes whether the thread
 * stays runnable, in a slot of an array the daemon has mapped (probed/sample/runstate.c). So
 * the sampler learns, for each thread at each tick, whether it runs and whether it ran since
 * its last look by reading memory: no /proc/PID/task/TID/{stat,schedstat} read a thread a
 * tick (4.5 and 1 us each here, cold at 100 Hz).
 *
 * Only threads in the tid -> slot map are noted; the daemon inserts them (after writing the
 * slot's tid) and deletes them. tids are the kernel's global ones: the daemon uses the board
 * only where it runs in the initial pid namespace. Every other switch costs one hash lookup
 * for each side.
 */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "runboard.h"

char LICENSE[] SEC("license") = "GPL"; /* tp_btf programs are GPL-only */

#define TASK_DEAD_STATE 0x80 /* include/linux/sched.h: TASK_DEAD */

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, RUNBOARD_SLOTS);
    __type(key, __u32);   /* tid */
    __type(value, __u32); /* its slot in slots */
} slot_of SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(map_flags, BPF_F_MMAPABLE);
    __uint(max_entries, RUNBOARD_SLOTS);
    __type(key, __u32);
    __type(value, struct runboard_slot);
} slots SEC(".maps");

/* A kernel older than 5.14 names the state field "state". */
struct task_struct___pre514 {
    volatile long state;
} __attribute__((preserve_access_index));

static __u32 task_state(struct task_struct *t)
{
    if (bpf_core_field_exists(t->__state))
        return BPF_CORE_READ(t, __state);
    return (__u32)BPF_CORE_READ((struct task_struct___pre514 *)t, state);
}

static void note(__u32 tid, __u32 state)
{
    struct runboard_slot *s;
    __u32 *at;

    if (tid == 0) /* a CPU's idle task */
        return;
    at = bpf_map_lookup_elem(&slot_of, &tid);
    if (!at)
        return;
    s = bpf_map_lookup_elem(&slots, at);
    if (!s || s->tid != tid)
        return;
    /* one thread switches on one CPU at a time: this read and write race no other note */
    s->word = (((s->word >> RUNBOARD_COUNT_SHIFT) + 1) << RUNBOARD_COUNT_SHIFT) | state;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(runstate_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
    __u32 state = task_state(prev);

    /* still runnable: preempted, or a sleep that a signal or a wakeup undid (state back to
     * TASK_RUNNING) before it was switched out */
    note(BPF_CORE_READ(prev, pid), state == TASK_DEAD_STATE ? RUNBOARD_DEAD
                                   : preempt || state == 0  ? RUNBOARD_RUNNABLE
                                                            : RUNBOARD_WAITING);
    note(BPF_CORE_READ(next, pid), RUNBOARD_RUNNABLE);
    return 0;
}
