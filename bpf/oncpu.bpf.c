// SPDX-License-Identifier: GPL-2.0
/*
 * oncpu.bpf.c - the eBPF sampler: runs at each cpu-clock sample of a target's thread (one perf
 * event per thread, opened by probed/native/perfstack.c) and copies, in that instant, the thread's
 * user registers, the top of its user stack and its chain of Python frames into a ring
 * buffer that the daemon empties every tick (probed/native/bpfstack.c). Nothing is unwound or named
 * here: the native stack is unwound from the copy with DWARF CFI in the daemon (the Python
 * this runs is built without frame pointers, so the kernel's own callchains stop after one
 * frame), and the Python frames are decoded by libpyframes from the copied frames.
 *
 * The thread's PyThreadState comes from the tstates map, which the daemon fills from its own
 * reads; a thread it has not seen yet gets native frames only. No wakeup per sample: that
 * costs the target ~5 us in this VM (../../shared/notes/native.md); the daemon polls.
 */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>

#include "oncpu.h"

char LICENSE[] SEC("license") = "GPL"; /* bpf_probe_read_user() is GPL-only */

/* The target, and the pid namespace its pid is in (the daemon's): ids seen from there, as
 * /proc and perf give them to the daemon, whether or not it runs in a container. The ids
 * helper answers only for tasks whose own namespace that is: for a target in a container of
 * its own (global_ids, set where the daemon runs in the initial namespace) the global ids are
 * the daemon's. */
const volatile __u32 target_tgid = 0;
const volatile __u64 pidns_dev = 0, pidns_ino = 0;
const volatile bool global_ids = false;
const volatile struct oncpu_chain chain = {};

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 4 << 20); /* the loader may size it before load */
} events SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, ONCPU_THREADS_MAX);
    __type(key, __u32);   /* tid */
    __type(value, __u64); /* its PyThreadState in the target */
} tstates SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct oncpu_counts);
} counts SEC(".maps");

/* The registers the thread had in user mode, in DWARF's order. */
static void copy_regs(struct oncpu_event *e)
{
    struct pt_regs *r = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());

    e->regs[0] = BPF_CORE_READ(r, ax);
    e->regs[1] = BPF_CORE_READ(r, dx);
    e->regs[2] = BPF_CORE_READ(r, cx);
    e->regs[3] = BPF_CORE_READ(r, bx);
    e->regs[4] = BPF_CORE_READ(r, si);
    e->regs[5] = BPF_CORE_READ(r, di);
    e->regs[6] = BPF_CORE_READ(r, bp);
    e->regs[7] = BPF_CORE_READ(r, sp);
    e->regs[8] = BPF_CORE_READ(r, r8);
    e->regs[9] = BPF_CORE_READ(r, r9);
    e->regs[10] = BPF_CORE_READ(r, r10);
    e->regs[11] = BPF_CORE_READ(r, r11);
    e->regs[12] = BPF_CORE_READ(r, r12);
    e->regs[13] = BPF_CORE_READ(r, r13);
    e->regs[14] = BPF_CORE_READ(r, r14);
    e->regs[15] = BPF_CORE_READ(r, r15);
    e->regs[16] = BPF_CORE_READ(r, ip);
}

/* Whole pages from the one holding sp, so every read has a constant size and place; a read
 * past the stack's mapping fails, and the copy ends there. */
static void copy_stack(struct oncpu_event *e)
{
    __u64 base = e->regs[7] & ~4095ull;

    e->stack_base = base;
    e->stack_bytes = 0;
    for (int i = 0; i < ONCPU_STACK_PAGES; i++) {
        if (bpf_probe_read_user(e->stack + i * 4096, 4096, (void *)(base + i * 4096ull)))
            break;
        e->stack_bytes += 4096;
    }
}

/* The thread's frames, innermost first, each one's first chain.fr_bytes bytes. */
static void copy_frames(struct oncpu_event *e, __u32 tid)
{
    __u64 *tstate = bpf_map_lookup_elem(&tstates, &tid);
    __u32 size = chain.fr_bytes;
    __u64 f = 0;
    int i;

    e->n_frames = 0;
    if (!tstate) {
        e->py = ONCPU_PY_NONE;
        return;
    }
    e->py = ONCPU_PY_FAULT;
    if (bpf_probe_read_user(&f, sizeof(f), (void *)(*tstate + chain.ts_frame)))
        return;
    if (chain.cframe_frame >= 0 && f &&
        bpf_probe_read_user(&f, sizeof(f), (void *)(f + chain.cframe_frame)))
        return;
    if (size > ONCPU_FRAME_BYTES)
        size = ONCPU_FRAME_BYTES;
    for (i = 0; i < ONCPU_FRAMES_MAX && f; i++) {
        e->frame_raddr[i] = f;
        if (bpf_probe_read_user(e->frames[i], size, (void *)f) ||
            bpf_probe_read_user(&f, sizeof(f), (void *)(f + chain.fr_back)))
            return;
        e->n_frames = i + 1;
    }
    e->py = f ? ONCPU_PY_TRUNCATED : ONCPU_PY_OK;
}

SEC("perf_event")
int oncpu_sample(void *ctx)
{
    struct bpf_pidns_info ids;
    __u32 zero = 0;
    struct oncpu_counts *c = bpf_map_lookup_elem(&counts, &zero);
    struct oncpu_event *e;

    if (global_ids) {
        __u64 id = bpf_get_current_pid_tgid();

        ids.tgid = (__u32)(id >> 32);
        ids.pid = (__u32)id;
    } else if (bpf_get_ns_current_pid_tgid(pidns_dev, pidns_ino, &ids, sizeof(ids))) {
        return 0;
    }
    if (ids.tgid != target_tgid || !c)
        return 0;
    c->samples++;
    e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
    if (!e) {
        c->lost++;
        return 0;
    }
    e->tid = ids.pid;
    e->time_ns = bpf_ktime_get_ns();
    copy_regs(e);
    copy_stack(e);
    copy_frames(e, ids.pid);
    bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
    return 0;
}
