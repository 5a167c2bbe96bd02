/*
 * runboard.h - what the run-state board (runboard.bpf.c) and the daemon
 * (probed/sample/runstate.c) share: one slot per watched thread, written by the program at
 * each switch of that thread in or out, read by the daemon through a shared mapping of the
 * array, with no syscall.
 *
 * Shared by the BPF program (clang -target bpf, types from vmlinux.h) and the daemon (gcc,
 * <stdint.h>): the same fixed-size types under one name, so the layouts agree.
 */
#ifndef PROBED_RUNBOARD_H
#define PROBED_RUNBOARD_H

#ifdef __bpf__
typedef __u32 runboard_u32;
typedef __u64 runboard_u64;
#else
#include <stdint.h>
typedef uint32_t runboard_u32;
typedef uint64_t runboard_u64;
#endif

/* Threads watched at once, over every target: 32768 slots of 16 bytes (512 KiB shared), and
 * as many entries in the tid -> slot hash map. Past them a thread's state comes from /proc. */
#define RUNBOARD_SLOTS 32768

/* The low bits of a slot's word: what the last switch left the thread as. */
#define RUNBOARD_WAITING 0u  /* switched out to sleep or block */
#define RUNBOARD_RUNNABLE 1u /* switched in, or out while still runnable (preempted) */
#define RUNBOARD_DEAD 2u     /* switched out for the last time: the thread exited */
#define RUNBOARD_STATE_MASK 3u
#define RUNBOARD_COUNT_SHIFT                                                                       \
    2 /* the rest: how many switches, in and out, since the slot was set                           \
       */

struct runboard_slot {
    runboard_u32 tid; /* whose slot this is (0: free): the program writes only a match */
    runboard_u32 pad;
    /* (switches << RUNBOARD_COUNT_SHIFT) | state, stored in one write so a reader on another
     * CPU sees both of the same switch */
    runboard_u64 word;
};

#endif
