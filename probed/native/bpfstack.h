/*
 * bpfstack.h - a process's threads sampled by the eBPF sampler (bpf/oncpu.bpf.c): at each
 * sample of a thread on CPU, its user registers, the top of its user stack and its chain of
 * Python frames, all copied in the same instant (perfstack.h copies only the first two, and
 * the Python frames are then read later, when the stack may have moved on).
 *
 * bpfstack_open() loads the program for one process (libbpf skeleton, CO-RE against the
 * kernel's BTF) with the layout of its CPython's frame chain, and attaches it to one cpu-clock
 * event per thread (perfstack_open_bpf). The program finds a thread's frames from its
 * PyThreadState, which it learns from bpfstack__track(): the sampler's own reads tell it.
 * bpfstack__drain() empties the ring buffer (no wakeups: the program never wakes us).
 *
 * Threads: one thread uses a bpfstack. Memory: the samples handed to the callback live in the
 * ring buffer, valid during the call. Failure: -errno and a message: loading needs CAP_BPF
 * and CAP_PERFMON (or CAP_SYS_ADMIN) and a kernel with BTF; the caller then uses perf alone.
 */
#ifndef PROBED_BPFSTACK_H
#define PROBED_BPFSTACK_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "errbuf.h"

#include "pyframes.h"
#include "pyframes_native.h"

struct bpfstack;

struct bpfstack_stats {
    uint64_t samples;                                    /* the program ran for the process */
    uint64_t lost;                                       /* no room in the ring buffer */
    uint64_t py_copied, py_none, py_truncated, py_fault; /* what became of the Python frames */
    /* the program's own time in the kernel, while kernel.bpf_stats_enabled = 1 (0: off) */
    uint64_t run_ns, run_cnt;
};

#ifdef PROBED_BPF
int bpfstack_open(pid_t pid, uint32_t rate_hz, const struct pyf_chain *chain, struct bpfstack **ret,
                  struct errbuf *err);
void bpfstack_free(struct bpfstack *bs); /* NULL is a no-op */

/* Follows the process's threads: events for new ones, none for those gone. */
int bpfstack__refresh(struct bpfstack *bs, struct errbuf *err);

/* The Python threads the sampler read last (tid -> PyThreadState): the program copies the
 * frames of those threads; the others get native frames only. */
void bpfstack__track(struct bpfstack *bs, const struct pyf_thread *threads, size_t n);

/* Each sample taken since the last call, oldest first; @py is NULL when the Python frames
 * were not copied whole (no thread state known, deeper than the copy, a read that failed). */
typedef void (*bpfstack_fn)(void *ctx, const struct pyf_stack_copy *copy, uint64_t time_ns,
                            const struct pyf_frames_copy *py);
void bpfstack__drain(struct bpfstack *bs, bpfstack_fn fn, void *ctx);

void bpfstack__set_rate(struct bpfstack *bs, uint32_t rate_hz);
/* Counters since open (the kernel's, summed over CPUs, read now). */
void bpfstack__stats(struct bpfstack *bs, struct bpfstack_stats *ret);

#else /* built without the eBPF sampler (PROBED_BPF=OFF): perf alone; these are never used */
static inline int bpfstack_open(pid_t pid, uint32_t rate_hz, const struct pyf_chain *chain,
                                struct bpfstack **ret, struct errbuf *err)
{
    (void)rate_hz, (void)chain, (void)ret;
    errbuf_set(err, 0, "pid %d: probed was built without the eBPF sampler (PROBED_BPF=OFF)",
               (int)pid);
    return -EOPNOTSUPP;
}
static inline void bpfstack_free(struct bpfstack *bs)
{
    (void)bs;
}
static inline int bpfstack__refresh(struct bpfstack *bs, struct errbuf *err)
{
    (void)bs, (void)err;
    return -EOPNOTSUPP;
}
static inline void bpfstack__track(struct bpfstack *bs, const struct pyf_thread *threads, size_t n)
{
    (void)bs, (void)threads, (void)n;
}
typedef void (*bpfstack_fn)(void *ctx, const struct pyf_stack_copy *copy, uint64_t time_ns,
                            const struct pyf_frames_copy *py);
static inline void bpfstack__drain(struct bpfstack *bs, bpfstack_fn fn, void *ctx)
{
    (void)bs, (void)fn, (void)ctx;
}
static inline void bpfstack__set_rate(struct bpfstack *bs, uint32_t rate_hz)
{
    (void)bs, (void)rate_hz;
}
static inline void bpfstack__stats(struct bpfstack *bs, struct bpfstack_stats *ret)
{
    (void)bs;
    *ret = (struct bpfstack_stats){0};
}
#endif

#endif
