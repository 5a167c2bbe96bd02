/*
 * nccl.h - every collective and point-to-point call a process makes into NCCL, seen from
 * outside it: eBPF uprobes (bpf/ncclcalls.bpf.c) on the exported C API of the libnccl it has
 * mapped, with no code of probed's in the process. Whoever issues the call (torch.distributed
 * from Python, DDP's Reducer, FSDP, DeepSpeed, a compiled graph) is seen, where the collective
 * trace (`torch on --comm`, through the stub) sees only Python's calls and DDP's.
 *
 * A call is seen as it is queued on its CUDA stream: op, count and dtype (its bytes), root or
 * peer, communicator, thread and time. Its completion on the GPU is not. Communicators are
 * followed from their creation where the watch saw it (ncclCommInitRank, ...InitRankConfig,
 * ...InitRankScalable, ncclCommSplit, ncclCommShrink, and
 * ncclCommInitAll's communicator of one process's GPUs): their id (from the ncclUniqueId, the same
 * on every rank), size, and the number of each collective on them, counted from their first: one
 * collective has one number on every rank. A communicator made before the watch began is known by
 * its address and its calls are numbered from the first one seen: the process's own count.
 *
 * nccl__watch() is given the processes to watch at each pass (the sampled targets); one that
 * maps a library exporting NCCL's calls (its libnccl.so*, ROCm's librccl.so* with NCCL's API,
 * else torch's libtorch_cuda.so where NCCL is linked in statically: conda's builds, the
 * pytorch/pytorch images) gets the probes, attached to the mapped file itself
 * (/proc/PID/map_files/START-END: the inode the process runs, whatever its path now names;
 * without the capability those links need, its path in the process's mount namespace while
 * that is the inode mapped), opened once and probed through /proc/self/fd/N,
 * filtered to that process (two uprobe_multi links where the kernel has them, 6.6+: removed
 * in 0.2 s; else a perf event a probe, removed in 0.1 s each), and keeps them until it is no
 * longer given (or ends: the kernel drops the probes with the process). One that maps none is
 * looked at again every NCCL_RESCAN_NS (a job imports torch, and so loads NCCL, after it was
 * attached). The probes go with the daemon: the kernel removes them when its descriptors close, at
 * any exit.
 *
 * Pids are the kernel's global ones: the watch refuses to start outside the initial pid
 * namespace. x86-64 only (the programs read the System V argument registers).
 *
 * Threads: one thread uses a watch (the meter's). Memory: nccl_open allocates it; calls
 * handed to the callback live during the call. Failure: -errno and @err; loading needs
 * CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN), uprobes and BTF.
 */
#ifndef PROBED_GPU_NCCL_H
#define PROBED_GPU_NCCL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "errbuf.h"

#define NCCL_RESCAN_NS 5000000000LL /* a process without libnccl is looked at again this late */
/* call ids of the rows: above any the collective trace gives (it counts from 0) */
#define NCCL_CALL_ID_BASE (1LL << 62)

struct nccl_watch;

/* A process to watch: its target. */
struct nccl_target {
    int64_t id, start_time; /* start_time: /proc/PID/stat's, so a reused pid is not taken */
    pid_t pid;
};

/* One call, as comm_calls stores it (group_size, seq, peer: -1 for NULL). */
struct nccl_call {
    int64_t target_id, ts_ns; /* CLOCK_REALTIME of its entry */
    int64_t seq, bytes;
    int32_t group_size, peer, tid;
    const char *op;     /* "all_reduce", "broadcast", "reduce", "all_gather", ... */
    const char *dtype;  /* torch's names: "float32", "bfloat16" ... */
    const char *source; /* "nccl": numbered from the communicator's creation; "trace" */
    char group[40];     /* "nccl:<id>", the same on every rank; "nccl@<address>": unknown */
};

struct nccl_stats {
    uint64_t processes; /* watched now */
    uint64_t calls;     /* handed out since the watch started */
    uint64_t lost;      /* calls the program could not record (its ring buffer or table full) */
    uint64_t unknown;   /* calls of a process no longer watched, dropped */
};

int nccl_open(struct nccl_watch **ret, struct errbuf *err);
void nccl_free(struct nccl_watch *w); /* NULL is a no-op; removes every probe */

/* Watches @targets (and stops watching the processes not among them). A process whose probes
 * could not be attached is logged once and looked at again later. */
void nccl__watch(struct nccl_watch *w, const struct nccl_target *targets, size_t n);

/* Each call recorded since the last drain, oldest first; how many. */
typedef void (*nccl_call_fn)(void *ctx, const struct nccl_call *call);
size_t nccl__drain(struct nccl_watch *w, nccl_call_fn fn, void *ctx);

void nccl__stats(struct nccl_watch *w, struct nccl_stats *ret);

/* The library @pid maps ("" none) of its latest look, for its status. */
const char *nccl__library(struct nccl_watch *w, pid_t pid);

#endif
