/*
 * perfstack.h - a process's threads sampled by the kernel with perf events: at each sample, the
 * thread's user registers and a copy of the top of its user stack, to be unwound later with
 * pyf_native__unwind_copy(). The target is never stopped: this is how native stacks are
 * sampled continuously (the fallback when the eBPF sampler cannot load).
 *
 * One cpu-clock event per thread (pid = tid, cpu = -1), PERF_SAMPLE_REGS_USER and
 * PERF_SAMPLE_STACK_USER, in a ring of its own that is read without wakeups (polling: a
 * wakeup per sample costs the target ~25 us here, ../shared/notes/native.md). Opened with
 * perfstack_open_bpf(), the events run the eBPF sampler instead (bpfstack.h) and have no
 * rings: the program's ring buffer holds the samples, and perfstack only follows the threads.
 * perfstack__refresh() opens events for threads born since, and closes those of threads gone.
 *
 * Threads: one thread uses a perfstack. Memory: the rings are mapped at open/refresh; a
 * sample is handed to the callback in a buffer of the perfstack's, valid during the call.
 * Failure: -errno and a message (perf_event_paranoid, CAP_PERFMON, the process gone).
 */
#ifndef PROBED_PERFSTACK_H
#define PROBED_PERFSTACK_H

#include <stdint.h>
#include <sys/types.h>

#include "errbuf.h"

#include "pyframes_native.h"

#define PERFSTACK_THREADS_MAX 512

struct perfstack;

/* @ring_pages (a power of two) of 4 KiB per thread, locked memory: room for the samples of
 * that thread between two drains (a sample is @stack_bytes + 200 bytes). */
int perfstack_open(pid_t pid, uint32_t rate_hz, uint32_t stack_bytes, uint32_t ring_pages,
                   struct perfstack **ret, struct errbuf *err);
/* The same events, each running BPF program @prog_fd at its samples (no rings, no drain). */
int perfstack_open_bpf(pid_t pid, uint32_t rate_hz, int prog_fd, struct perfstack **ret,
                       struct errbuf *err);
/* Follows the process's threads: events for new ones, none for those gone. */
int perfstack__refresh(struct perfstack *ps, struct errbuf *err);

/* Each sample taken since the last call, oldest first per thread; @time_ns is
 * CLOCK_MONOTONIC. *ret_lost: samples the kernel dropped because a ring was full. */
typedef void (*perfstack_fn)(void *ctx, const struct pyf_stack_copy *copy, uint64_t time_ns);
int perfstack__drain(struct perfstack *ps, perfstack_fn fn, void *ctx, uint64_t *ret_lost);

/* Samples every thread at @rate_hz of its CPU time from now on. */
void perfstack__set_rate(struct perfstack *ps, uint32_t rate_hz);
size_t perfstack__threads(const struct perfstack *ps);
void perfstack_free(struct perfstack *ps); /* NULL is a no-op */

#endif
