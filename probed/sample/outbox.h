/*
 * outbox.h - what the sampler hands the store: samples and the definitions they refer to.
 *
 * Two fixed-size halves: the sampler thread appends to one while the writer thread writes the
 * other to SQLite, then they swap (outbox__swap, once a second). The lock is held for an
 * append or a pointer swap, never across I/O, so sampling never waits on the database.
 * When a half is full, what does not fit is dropped and counted (n_dropped), never grown.
 *
 * Ids are 64-bit content hashes (hashid.h): a definition may be sent twice (the store ignores
 * the second), so the sampler only remembers, lossily, which ones it already sent.
 *
 * Threads: outbox__lock/unlock + the add functions on the sampler side (the registry also
 * adds attaches and ends, the meter thread memory and CPU readings, the exits thread how
 * targets ended), outbox__swap on the writer.
 * Memory: all of it allocated by outbox_new.
 */
#ifndef PROBED_OUTBOX_H
#define PROBED_OUTBOX_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/nvml.h"

struct ob_sample {
    int64_t ts_ns, target_id, stack_id;
    int32_t tid, state;
};

/* frames.kind; a task frame is the asyncio task the frames inside it ran for (tasktag.h) */
enum ob_frame_kind { OB_FRAME_PYTHON, OB_FRAME_NATIVE, OB_FRAME_KERNEL, OB_FRAME_TASK };

struct ob_frame {
    int64_t id, func_id, file_id;
    int32_t line, first_line;
    int32_t kind; /* enum ob_frame_kind */
};

/* A variable-length definition (a string, a stack, a thread) lives in the half's arena. */
struct ob_def {
    int64_t id;    /* string/stack id, or the target id of a thread */
    int64_t extra; /* thread: tid; stack: its task's label (string id), 0: none */
    uint32_t off;  /* into arena */
    uint32_t len;  /* bytes (string, name) or frames (stack: len int64 frame ids) */
};

/* A target attached (a row for the targets table) or ended. */
struct ob_target {
    int64_t id, start_time, attached_ns;
    int32_t pid, uid, rate_hz, rank, local_rank, world_size; /* rank etc.: -1 unknown */
    int32_t follow_children, native, nccl;
    char cmdline[512], py_version[32];
};

struct ob_end {
    int64_t target_id, ended_ns;
    char reason[128];
};

#define OB_TARGETS_MAX 256 /* attaches and ends per second */

/* How a target ended, as the kernel told it (exits.c): a row of the crashes table. */
struct ob_crash {
    int64_t target_id, ts_ns;
    int32_t pid, exit_code, signal, core_dumped; /* exit_code, signal: -1 when not that kind */
    char kind[16];
    char message[256];
    char kernel[512]; /* the kernel's lines about it; "" none */
};
#define OB_CRASHES_MAX 64 /* targets ending per second (more wait in the exits thread) */

/* A target's memory and CPU at one instant (meter.c), and one of its threads' CPU. */
struct ob_usage {
    int64_t target_id, ts_ns, rss, pss, uss, swap, cpu_ns;
    int32_t threads;
};

struct ob_thread_cpu {
    int64_t target_id, ts_ns, cpu_ns;
    int32_t tid;
};

/* A reading of a GPU (gpu/nvml.h), a target's process on one, an Xid error one raised. gpu_id
 * is the hash of the device's UUID (hashid.h): the same GPU has the same id in every run. */
struct ob_gpu {
    int64_t ts_ns, gpu_id;
    struct gpu_device d;
};

struct ob_gpu_proc {
    int64_t target_id, ts_ns, gpu_id, mem_used_bytes, sm_util_pct;
    int32_t pid;
};

struct ob_gpu_xid {
    int64_t ts_ns, gpu_id, xid;
};

/* A call a watched process made into NCCL (gpu/nccl.h): a row of comm_calls. */
struct ob_comm {
    int64_t target_id, call_id, ts_ns, seq, bytes;
    int32_t group_size, peer; /* -1: NULL */
    char op[16], dtype[16], source[8], group[40];
};
#define OB_COMMS_MAX 8192 /* NCCL calls per half (a second's); more are counted lost */

#define OB_GPU_MAX 256       /* GPU readings per half: 8 GPUs at 10 readings a second, x3 */
#define OB_GPU_PROCS_MAX 512 /* target processes on GPUs, per half */
#define OB_GPU_XIDS_MAX 64

#define OB_USAGE_MAX 4096       /* target readings per half */
#define OB_THREAD_CPU_MAX 65536 /* thread readings per half */

struct ob_half {
    struct ob_target targets[OB_TARGETS_MAX];
    struct ob_end ends[OB_TARGETS_MAX];
    struct ob_crash crashes[OB_CRASHES_MAX];
    size_t n_targets, n_ends, n_crashes;
    struct ob_sample *samples;
    struct ob_frame *frames;
    struct ob_def *strings, *stacks, *threads;
    size_t n_samples, n_frames, n_strings, n_stacks, n_threads;
    uint8_t *arena;
    size_t arena_used;
    uint64_t n_dropped; /* samples lost because this half was full */
    struct ob_usage *usage;
    struct ob_thread_cpu *thread_cpu;
    size_t n_usage, n_thread_cpu;
    uint64_t n_usage_dropped; /* usage and thread rows lost because this half was full */
    struct ob_gpu gpus[OB_GPU_MAX];
    struct ob_gpu_proc gpu_procs[OB_GPU_PROCS_MAX];
    struct ob_gpu_xid gpu_xids[OB_GPU_XIDS_MAX];
    size_t n_gpus, n_gpu_procs, n_gpu_xids;
    uint64_t n_gpu_dropped; /* GPU rows lost because this half was full */
    struct ob_comm *comms;  /* OB_COMMS_MAX */
    size_t n_comms;
    uint64_t n_comms_dropped; /* NCCL calls lost because this half was full */
};

struct outbox {
    /* held for an append or a swap; lock order: the registry's (targets.h) first, never the
     * other way round: nothing is called with it held */
    pthread_mutex_t lock;
    struct ob_half *fill, *spare;
    size_t cap_samples, cap_defs, cap_arena;
    struct ob_half halves[2];
    atomic_bool forget_sent; /* the store lost definitions: the sampler sends them again */
};

/* @cap_samples samples per second of data; definitions and arena sized from it. */
int outbox_new(size_t cap_samples, struct outbox **ret);
void outbox_free(struct outbox *ob);

/* The sampler appends between lock and unlock; each add returns false when full. */
struct ob_half *outbox__lock(struct outbox *ob);
void outbox__unlock(struct outbox *ob);
bool ob_half__sample(struct outbox *ob, struct ob_half *h, const struct ob_sample *s);
bool ob_half__frame(struct outbox *ob, struct ob_half *h, const struct ob_frame *f);
bool ob_half__string(struct outbox *ob, struct ob_half *h, int64_t id, const char *s);
bool ob_half__stack(struct outbox *ob, struct ob_half *h, int64_t id, const int64_t *frame_ids,
                    size_t n, int64_t task_id);
/* A thread's names: threading's @name (or its OS name when threading has none), @os_name. */
bool ob_half__thread(struct outbox *ob, struct ob_half *h, int64_t target_id, int32_t tid,
                     const char *name, const char *os_name);

bool ob_half__target(struct ob_half *h, const struct ob_target *t);
bool ob_half__end(struct ob_half *h, int64_t target_id, int64_t ended_ns, const char *reason);
bool ob_half__crash(struct ob_half *h, const struct ob_crash *c);
bool ob_half__usage(struct ob_half *h, const struct ob_usage *u);
bool ob_half__thread_cpu(struct ob_half *h, const struct ob_thread_cpu *c);
bool ob_half__gpu(struct ob_half *h, const struct ob_gpu *g);
bool ob_half__gpu_proc(struct ob_half *h, const struct ob_gpu_proc *p);
bool ob_half__gpu_xid(struct ob_half *h, const struct ob_gpu_xid *x);
bool ob_half__comm(struct ob_half *h, const struct ob_comm *c);

/* Writer: takes the filled half (the sampler continues in the other, emptied one). The
 * returned half is the writer's until the next swap. */
struct ob_half *outbox__swap(struct outbox *ob);

/* Writer: a batch with definitions was lost; the sampler forgets which ones it sent. */
void outbox__forget_sent(struct outbox *ob);
/* Sampler: whether it must forget (once per call to outbox__forget_sent). */
bool outbox__take_forget(struct outbox *ob);

/* Batches the database would not take (a full disk), kept by the writer to write again later:
 * one half grown to hold them in order (definitions before the samples that use them), up to
 * a bound in bytes. Writer thread only. */
struct ob_backlog {
    struct ob_half h; /* n_* as in a half; arrays grown on demand */
    size_t cap_samples, cap_frames, cap_strings, cap_stacks, cap_threads, cap_arena, cap_usage,
        cap_thread_cpu, cap_comms;
    size_t bytes; /* held */
};

/* Appends @h; -ENOSPC past @max_bytes (or 256 attaches or ends, or a half's GPU rows): nothing
 * appended, @h is lost. */
int ob_backlog_add(struct ob_backlog *b, const struct ob_half *h, size_t max_bytes);
void ob_backlog_clear(struct ob_backlog *b); /* empty, its memory freed */

#endif
