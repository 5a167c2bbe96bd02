/*
 * target.h - one attached process as the daemon sees it: identity, rate, sampling buffers.
 *
 * A process is identified by pid + start time (pids are reused). target_new() opens it with
 * libpyframes and sizes every buffer the sampler needs, so sampling never allocates.
 * Threads: created by targets__attach() on the attaching thread (the attach thread, the
 * follower, main at start), freed by the registry; sampled on the sampler thread while listed
 * in the registry (targets.h), whose lock guards the mutable fields.
 * Failure: target_new() returns -errno with a message for the user in @err.
 */
#ifndef PROBED_TARGET_H
#define PROBED_TARGET_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/procfs.h"
#include "errbuf.h"
#include "pyframes.h"
#include "sample/tasktag.h"

#define TARGET_THREADS_MIN 64           /* Python threads a target's buffers hold at first */
#define TARGET_THREADS_MAX 4096         /* they double up to this (libpyframes' THREAD_SPANS_MAX) */
#define TARGET_NAME_RECHECKS 8          /* threads whose threading name is asked again */
#define TARGET_NAME_TRIES 3             /* times, a second apart */
#define TARGET_DEPTH_MAX 256            /* frames stored per stack: deeper ones keep both ends */
#define TARGET_READ_DEPTH PYF_DEPTH_MAX /* frames read of a thread found deeper than that */

#define TARGET_OWN_TIDS 16 /* probed's stub threads known at once (one per request served) */

enum target_state { TARGET_SAMPLING, TARGET_EXITED, TARGET_DETACHED, TARGET_FAILED };

struct target_stats {
    uint64_t ticks;       /* times the process was sampled */
    uint64_t samples;     /* thread stacks recorded */
    uint64_t torn;        /* thread stacks that kept changing while read: dropped */
    uint64_t unchanged;   /* of samples: stacks not read again, the thread asleep since */
    uint64_t errors;      /* ticks that failed as a whole (not fatal) */
    uint64_t late;        /* times sampling fell too far behind (sampler.c) and skipped ahead */
    uint64_t dropped;     /* samples the outbox had no room for */
    uint64_t threads_cut; /* ticks that found TARGET_THREADS_MAX threads or more: the rest unread */
    uint64_t lost;        /* samples taken but lost: the database would not take them (disk full) */
    uint64_t by_state[4]; /* samples by state: bit 0 on CPU, bit 1 holds the GIL */
    uint64_t own_skipped; /* thread stacks of probed's own (the stub's threads): left out */
};

/* The torch trace of a target, as its drains reported it (for /metrics). */
struct target_torch {
    bool on;             /* a drain came */
    bool tracing;        /* the trace was on at the last drain (off, or the drains stopped) */
    uint64_t steps;      /* steps with a wall time */
    double step_seconds; /* their sum */
    uint64_t dropped;    /* records the target could not buffer */
    uint64_t ddp_steps;  /* DDP iterations timed (--comm): ddp_steps' rows */
    double ddp_compute_seconds, ddp_wait_seconds; /* their sums */
    bool has_memory, has_reserved;
    double allocated_mb, reserved_mb;
    bool comm;                       /* collectives traced (--comm) */
    uint64_t comm_calls, comm_bytes; /* calls completed (DDP's steps apart), their bytes */
    double comm_seconds;             /* and their time */
    bool has_comm_seq;
    int64_t comm_seq;                /* the latest c10d number of the default group */
    int64_t comm_in_flight_since_ns; /* the oldest call in flight at the last drain; 0: none */
};

/* The latest stretch of a target's samples the database would not take (writer.c). */
struct target_gap {
    int64_t from_ns, to_ns; /* the first and last lost sample's time; 0: none yet */
    uint64_t samples;
    char why[128];
};

struct native;
struct pyf_symcache;

struct target {
    int64_t id;               /* targets.id in the store */
    bool resumed;             /* picked up again after a daemon restart: its row exists already */
    bool follow_children;     /* attach --children: its new descendants are attached too */
    bool allocation_tracking; /* resumed with allocation tracking on (allocs.h) */
    bool torch_tracing;       /* resumed with the torch trace on (torchtrace.h) */
    bool catching;            /* resumed with `catch` on (intarget/catch.h) */
    bool native_wanted;       /* attach --native: native frames in the stacks (native.h) */
    bool nccl_wanted;         /* attach --nccl: its NCCL calls recorded (gpu/nccl.h) */
    bool native_perf_only;    /* attach --native=perf: not the eBPF sampler */
    pid_t pid;
    uid_t uid;
    int64_t start_time;   /* /proc/PID/stat field 22 */
    uint64_t start_stack; /* field 28: changes when it execs (procfs_identity) */
    char cmdline[512];
    char py_version[32];
    int rank, local_rank, world_size; /* from RANK/LOCAL_RANK/WORLD_SIZE; -1: not set */

    uint32_t rate_hz;
    bool rate_is_default;       /* attached without a rate: follows config sample_rate */
    int64_t period_ns, next_ns; /* CLOCK_MONOTONIC */
    int64_t deadline_ns;        /* --duration: detach at this CLOCK_MONOTONIC time; 0: never */
    int64_t attached_ns;        /* CLOCK_REALTIME */

    enum target_state state;
    int64_t ended_ns; /* CLOCK_REALTIME, when it ended; 0 while sampling */
    char end_reason[128];
    struct target_stats stats;
    struct target_gap gap;
    struct proc_usage usage; /* the meter's latest reading (meter.h); usage_ns 0: none yet */
    int64_t usage_ns;
    int64_t gpu_bytes;         /* on every GPU at the meter's latest reading; -1: no GPU reading */
    struct target_torch torch; /* the torch trace's totals, from its drains */
    uint64_t errors_seen;      /* stats.errors when the process was last checked to be the same */
    /* the main thread's (tid == pid) latest stack, and since when it has been that one
     * (CLOCK_REALTIME; 0: not sampled yet): a rank stuck in a collective keeps one stack */
    int64_t main_stack_id, main_stack_since_ns;

    /* sampling buffers: owned, sized in target_new(); freed early when the target ends */
    struct pyf_target *pyf;
    struct native *native; /* the kernel's samples of native stacks; NULL: Python frames only */
    struct errbuf native_error; /* why native_wanted is not met (the fallback to Python only) */
    struct pyf_thread *threads; /* threads_cap of each */
    struct pyf_stack *stacks;
    size_t n_threads;             /* of threads and stacks, read at the last tick (0: it failed) */
    struct tasktag tasks;         /* which asyncio task each thread ran (sampler.c) */
    struct pyf_frame *frame_pool; /* TARGET_DEPTH_MAX frames per thread */
    struct pyf_frame **deep;      /* threads_cap: a deep thread's own TARGET_READ_DEPTH frames */
    int64_t *stack_ids;           /* threads_cap: each thread's stack id at the last tick stored
                                   * (sampler.c; 0: none, or not to be reused) */
    size_t threads_cap;
    pid_t *known_tids; /* tids whose name was sent to the store (sampler.c), sorted */
    size_t n_known_tids, known_tids_cap;
    /* the stub's threads (named probed-stub) among them: their samples are left out */
    pid_t own_tids[TARGET_OWN_TIDS];
    size_t n_own_tids;
    /* Python threads named by their OS name, found before threading registered them: asked
     * again (sampler.c) */
    struct name_recheck {
        pid_t tid;
        int tries;
        uint64_t ident;
        int64_t due_ns; /* CLOCK_MONOTONIC */
    } name_rechecks[TARGET_NAME_RECHECKS];
    size_t n_name_rechecks;
};

/* Opens @pid for sampling at @rate_hz. @err receives a message for the user on failure. */
int target_new(pid_t pid, uint32_t rate_hz, struct target **ret, struct pyf_err *err);
void target_free(struct target *t); /* NULL is a no-op */
/* A tick found every thread slot full: room for twice as many (up to TARGET_THREADS_MAX), on
 * the sampler thread, between ticks. -ENOSPC at the maximum, -ENOMEM: the old room is kept. */
int target__grow_threads(struct target *t);
/* Stack @i came back truncated at TARGET_DEPTH_MAX: room for TARGET_READ_DEPTH frames in it
 * (its frames so far kept, as the next read's guess). -ENOMEM: it stays as it was; -ENOSPC:
 * it has that room already. */
int target__deepen(struct target *t, size_t i);
/* Starts sampling @t's native stacks (attach --native): with the eBPF sampler, else with perf
 * (the log says why). On failure the target goes on with Python frames only; t->native_error,
 * the log and the returned -errno say why. */
int target__open_native(struct target *t, struct pyf_symcache *symbols);
/* The same for a target already sampled (targets__set_native): opened from copies of its pid,
 * rate and chain, outside the registry's lock, into *@ret (NULL on failure, @err says why). */
int target_native_open(pid_t pid, uint32_t rate_hz, const struct pyf_chain *chain, bool perf_only,
                       struct pyf_symcache *symbols, struct native **ret, struct errbuf *err);
/* "native-ebpf", "native-perf" or "python": what the stacks of @t hold, and how. */
const char *target_mode(const struct target *t);
/* Frees the sampling buffers of a target that has ended (its identity and stats stay). */
void target_release(struct target *t);

const char *target_state_name(enum target_state s);

#endif
