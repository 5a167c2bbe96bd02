/*
 * oncpu.h - what the eBPF sampler (oncpu.bpf.c) hands the daemon (probed/native/bpfstack.c) for
 * each sample of a thread on CPU: its user registers, the top of its user stack and its chain of
 * Python frames, all copied in the same instant while the thread is interrupted (perf's
 * cpu-clock event fires, the program runs on that CPU before the thread runs on).
 *
 * Shared by the BPF program (clang -target bpf, types from vmlinux.h) and the daemon (gcc,
 * <stdint.h>): the same fixed-size types under one name, so the layouts agree.
 */
#ifndef PROBED_ONCPU_H
#define PROBED_ONCPU_H

#ifdef __bpf__
typedef __u8 oncpu_u8;
typedef __u32 oncpu_u32;
typedef __s32 oncpu_s32;
typedef __u64 oncpu_u64;
#else
#include <stdint.h>
typedef uint8_t oncpu_u8;
typedef uint32_t oncpu_u32;
typedef int32_t oncpu_s32;
typedef uint64_t oncpu_u64;
#endif

#define ONCPU_DWARF_REGS 17  /* rax rdx rcx rbx rsi rdi rbp rsp r8-r15 rip: DWARF's order */
#define ONCPU_STACK_PAGES 5  /* whole pages from the one holding sp: 16-20 KiB of stack */
#define ONCPU_FRAMES_MAX 128 /* Python frames copied; a deeper chain is marked truncated */
#define ONCPU_FRAME_BYTES                                                                          \
    128                        /* of each frame: the fields libpyframes reads (<= 128 on 3.6-3.15) \
                                */
#define ONCPU_THREADS_MAX 4096 /* threads of one process whose thread state the map holds */

/* Where the frame chain starts and how it goes on, from libpyframes' layout of the target's
 * CPython (pyf_target__chain); set before the program is loaded. */
struct oncpu_chain {
    oncpu_s32 ts_frame;     /* PyThreadState -> the innermost frame, or the _PyCFrame holding it */
    oncpu_s32 cframe_frame; /* >= 0: _PyCFrame -> the innermost frame (3.11, 3.12) */
    oncpu_s32 fr_back;      /* frame -> its caller */
    oncpu_u32 fr_bytes;     /* bytes copied of each frame (<= ONCPU_FRAME_BYTES) */
};

enum oncpu_py {
    ONCPU_PY_NONE = 0,      /* no thread state known for the thread: native frames only */
    ONCPU_PY_OK = 1,        /* the whole chain was copied */
    ONCPU_PY_TRUNCATED = 2, /* deeper than ONCPU_FRAMES_MAX */
    ONCPU_PY_FAULT = 3,     /* a read failed (a page not present, a stale thread state) */
};

struct oncpu_event {
    oncpu_u32 tid;
    oncpu_u32 py;      /* enum oncpu_py */
    oncpu_u64 time_ns; /* CLOCK_MONOTONIC */
    oncpu_u64 regs[ONCPU_DWARF_REGS];
    oncpu_u64 stack_base;  /* the page of sp: stack[] starts here */
    oncpu_u32 stack_bytes; /* of stack[] read (whole pages; less at the stack's end) */
    oncpu_u32 n_frames;
    oncpu_u64 frame_raddr[ONCPU_FRAMES_MAX]; /* innermost first */
    oncpu_u8 frames[ONCPU_FRAMES_MAX][ONCPU_FRAME_BYTES];
    oncpu_u8 stack[ONCPU_STACK_PAGES * 4096];
};

/* Per-CPU counters the daemon sums. */
struct oncpu_counts {
    oncpu_u64 samples; /* the program ran for the target */
    oncpu_u64 lost;    /* no room in the ring: the daemon is behind */
};

#endif
