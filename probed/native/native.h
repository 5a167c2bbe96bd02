/*
 * native.h - a target's native stacks, sampled without stopping it (probectl attach --native).
 *
 * At rate_hz of each running thread's CPU time, the kernel copies its registers and top of
 * stack: the eBPF sampler (bpfstack.c), which copies the thread's Python frames in the same
 * instant, or, where it cannot load (no CAP_BPF, no BTF, built without it), perf alone
 * (perfstack.c). At each tick of the target the sampler calls native__collect(), which empties
 * the rings and unwinds each copy with libdw (pyf_native__unwind_copy), keeping each thread's
 * latest stack and Python frame copy; it then reads the Python stacks as always and merges each
 * native stack with the Python frames of the same instant where the eBPF sampler copied them,
 * else with those it read (sampler.c). native__track() tells the eBPF sampler which threads
 * are Python's. native__take() hands a thread's stack over once; native__next_unclaimed()
 * gives those of threads the Python read did not see (native-only threads: OpenMP, NCCL).
 * A thread that waits is never sampled by the kernel (its CPU clock stands still): for one the
 * tick read as waiting, native__waiting() reads where it waits once per wait, from the process
 * without stopping it (pyf_native__unwind_blocked), and gives the same stack at each tick
 * while its schedstat says it was not switched in since.
 * Names come from pyf_native__symbol() through a cache by address that the sampler fills.
 *
 * Threads: the sampler thread, after the attaching thread opened it; others only under the
 * registry's lock (native__stats for list and /metrics, native__set_rate). Memory: sized at open
 * (the waiting threads' stacks, ~0.5 MiB, and the thread list at their first use); a tick
 * allocates only in libdw (tables loaded ahead by pyf_native__prepare at open, and again when
 * the mappings are read anew).
 * Failure: native_open() returns -errno and a message (no perf: paranoid level, CAP_PERFMON).
 */
#ifndef PROBED_NATIVE_H
#define PROBED_NATIVE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "errbuf.h"

#include "pyframes_native.h"

#define NATIVE_DEPTH_MAX 128     /* native frames kept per sample */
#define NATIVE_STACK_BYTES 16384 /* of each thread's stack copied at a sample */
/* 128 KiB of perf ring a thread (locked memory): 7 samples, 70 ms of its CPU time at 100 Hz,
 * while the sampler empties it every 10 ms */
#define NATIVE_RING_PAGES 32

struct native_stats {
    uint64_t samples;     /* samples read (perf's, or the eBPF sampler's) */
    uint64_t lost;        /* dropped by the kernel: a ring was full */
    uint64_t superseded;  /* a newer sample of the thread came in the same tick */
    uint64_t unwind_ns;   /* time spent unwinding */
    uint64_t lag_ns;      /* sum of (Python read - native sample) over merged samples */
    uint64_t merged;      /* Python samples given native frames */
    uint64_t mismatched;  /* native and Python frames disagreed (the stack moved on) */
    uint64_t native_only; /* samples of threads with no Python frames */
    uint64_t name_hits, name_lookups;
    uint64_t maps_reread; /* the mappings were read again: a sample was in a new library */
    /* eBPF only: merged with the Python frames of the same instant; of the samples of a Python
     * thread, those whose frames were not copied (a thread not yet told, deeper than the copy,
     * a failed read) or did not decode or merge: those fall back to the frames read */
    uint64_t same_instant, py_uncopied, py_undecoded;
    uint64_t bpf_run_ns, bpf_runs; /* the program's time in the kernel (kernel.bpf_stats_enabled) */
    /* samples of waiting Python threads given the native stack where they wait (the sampler
     * counts them; not in merged), the reads of those stacks (once per wait), and the samples
     * left without one (it woke while it was read, or the unwind failed) */
    uint64_t waiting, waiting_reads, waiting_unread;
};

/* Which kernel sampler (ebpf first, perf where it cannot load) or only perf. */
enum native_backend { NATIVE_ANY = 0, NATIVE_PERF_ONLY = 1 };

#define NATIVE_PY_FRAMES 128      /* Python frames the eBPF sampler copies a sample */
#define NATIVE_PY_FRAME_BYTES 128 /* of each frame */

/* One thread's latest sample: return addresses innermost first. */
struct native_stack {
    pid_t tid;
    bool taken;
    int64_t mono_ns; /* when the kernel took it */
    size_t n_pcs;
    uint64_t pcs[NATIVE_DEPTH_MAX];
    /* the Python frames copied in the same instant (eBPF), NULL: none */
    const struct pyf_frames_copy *py;
};

struct native;

/* @chain: where the target's CPython keeps its frames, for the eBPF sampler (NULL: perf). Where
 * eBPF cannot be used, perf is; native__ebpf_error() says why. @symbols: the function tables
 * shared with the other targets (pyframes_native.h), kept until native_free(). */
int native_open(pid_t pid, uint32_t rate_hz, const struct pyf_chain *chain,
                enum native_backend backend, struct pyf_symcache *symbols, struct native **ret,
                struct errbuf *err);
void native_free(struct native *n); /* NULL is a no-op */

/* Empties the rings into each thread's latest stack (stacks of the previous tick go);
 * follows new and gone threads when @refresh_threads. */
void native__collect(struct native *n, bool refresh_threads);
/* Thread @tid's stack from the last collect, once (NULL: none, or taken already). */
struct native_stack *native__take(struct native *n, pid_t tid);
/* Where Python thread @tid waits, the tick having read it off CPU with schedstat @sched
 * (pyf_thread.sched): the stack read at an earlier tick of the same wait, or read now. NULL:
 * none (it ran while it was read, the unwind failed); counted either way. */
struct native_stack *native__waiting(struct native *n, pid_t tid, const uint64_t sched[3]);
/* The process's threads without Python state (not in @py) that wait, the kernel not having
 * sampled them this tick, one by one with the native stack where they wait (as
 * native__waiting reads it; NULL: no more): a hung rank's NCCL, CUDA and OpenMP threads.
 * The threads are those /proc listed at the last refresh (TIDS_MAX at most); whether one
 * waits comes from @pyf (pyf_target__thread_running), which keeps their files open. */
struct native_stack *native__next_waiting(struct native *n, struct pyf_target *pyf,
                                          const struct pyf_thread *py, size_t n_py);
/* The stacks no native__take() claimed, one by one (NULL: no more). */
struct native_stack *native__next_unclaimed(struct native *n);

/* The frame id the sampler gave @pc, if cached: *ret_eval_loop says whether it is the
 * interpreter's eval loop. native__remember() caches one. */
bool native__cached(struct native *n, uint64_t pc, int64_t *ret_id, bool *ret_eval_loop);
void native__remember(struct native *n, uint64_t pc, int64_t id, bool eval_loop);
/* Names @pc (not cached: see pyframes_native.h). A pc in no object known has the mappings read
 * again at a next native__collect (at most once a second): a library loaded since the attach. */
void native__name(struct native *n, uint64_t pc, bool innermost, struct pyf_native_frame *ret);

/* The Python threads of the last read: the eBPF sampler copies their frames from now on. */
void native__track(struct native *n, const struct pyf_thread *threads, size_t n_threads);
/* "ebpf" or "perf"; and why not eBPF ("" when it is, or was not asked for). */
const char *native__backend(const struct native *n);
const char *native__ebpf_error(const struct native *n);

/* The target's rate changed (config sample_rate): perf follows, one sample a tick. */
void native__set_rate(struct native *n, uint32_t rate_hz);

struct native_stats *native__stats(struct native *n);

#endif
