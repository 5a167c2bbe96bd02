/*
 * meter.h - the memory and CPU timeline: every config memory_interval, each sampled target's
 * RSS/PSS/USS/swap (/proc/PID/smaps_rollup), CPU time and thread count, and every one of its
 * threads' CPU time.
 *
 * Rows go into the outbox, and the writer stores them with the samples (tables memory and
 * thread_cpu); the latest reading also goes into the target (targets__set_usage) for /metrics
 * and `list`. At the same instants, the machine's GPUs (gpu/nvml.h: tables gpus, gpu_readings,
 * gpu_xids) and each target's memory on them (gpu_process_readings, targets__set_gpu); where
 * NVML cannot be loaded the reason is kept for /v1/status, logged once, and loading is tried
 * again a minute later, quietly. The same pass drains the NCCL calls of the targets that map a
 * libnccl (gpu/nccl.h: table comm_calls), while nccl_calls is on. smaps_rollup walks the target's
 * mappings in the kernel under its mmap lock, a millisecond or so for a large process, so it is
 * read on this thread and never more than ten times a second, not on the sampler thread. Threads:
 * meter_start/stop from main, meter__wake and meter__gpu from the API; the thread reads the config
 * and the registry.
 */
#ifndef PROBED_METER_H
#define PROBED_METER_H

#include <stdatomic.h>

#include "common/bgthread.h"
#include "config.h"
#include "gpu/nccl.h"
#include "gpu/nvml.h"
#include "sample/outbox.h"
#include "sample/targets.h"

/* What the GPU readings are, for /v1/status and /metrics. */
struct meter_gpu_status {
    bool reading;    /* NVML is loaded and its last reading worked */
    char error[512]; /* why not (the library missing, no driver, a failed reading) */
    char driver[80]; /* the driver's version */
    char library[256];
    uint64_t readings, failures;
    uint64_t xids; /* Xid errors seen since the daemon started */
};

/* Where NCCL's calls come from, for /v1/status. */
struct meter_nccl_status {
    bool watching;   /* the uprobes are loaded */
    char error[512]; /* why not */
    struct nccl_stats stats;
    uint64_t dropped; /* calls the outbox had no room for */
};

/* Per device of the latest reading: the Xid errors it raised since the daemon started. */
struct meter_gpu_xids {
    char uuid[96];
    uint64_t n;
    int64_t last; /* the latest Xid code; 0: none */
};

struct meter {
    struct targets *reg;
    struct outbox *ob;
    struct config *cfg;
    struct bgthread bg;
    atomic_uint_fast64_t readings, failures; /* targets read, and reads that failed */
    atomic_int_fast64_t last_pass_ns;        /* how long the last pass over all targets took */
    /* the GPUs: nvml and nvml_retry_ns are the thread's; the rest under gpu_lock */
    struct nvml *nvml;
    int64_t nvml_retry_ns;
    pthread_mutex_t gpu_lock;
    struct gpu_snapshot *gpu_last; /* the latest reading (NULL until the thread starts) */
    struct meter_gpu_status gpu_status;
    struct meter_gpu_xids gpu_xids[GPU_DEVICES_MAX]; /* as gpu_last's devices */
    /* NCCL's calls: nccl and nccl_retry_ns are the thread's; nccl_status under gpu_lock */
    struct nccl_watch *nccl;
    int64_t nccl_retry_ns;
    struct meter_nccl_status nccl_status;
};

int meter_start(struct meter *m);
void meter_stop(struct meter *m);
/* memory_interval changed: take it into account now, not at the next wake-up. */
void meter__wake(struct meter *m);
/* Where NCCL's calls come from. */
void meter__nccl(struct meter *m, struct meter_nccl_status *ret);
/* A copy of the latest GPU reading (NULL: not wanted), the status, and the Xid counts of its
 * devices (NULL: not wanted; GPU_DEVICES_MAX of them). */
void meter__gpu(struct meter *m, struct gpu_snapshot *ret_last, struct meter_gpu_status *ret_status,
                struct meter_gpu_xids *ret_xids);

#endif
