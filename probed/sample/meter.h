/*
 * meter.h - the memory and CPU timeline: every config memory_interval, each sampled target's
 * RSS/PSS/USS/swap (/proc/PID/smaps_rollup), CPU time and thread count, and every one of its
 * threads' CPU time.
 *
 * Rows go into the outbox, and the writer stores them with the samples (tables memory and
 * thread_cpu); the latest reading also goes into the target (targets__set_usage) for /metrics
 * and `list`. smaps_rollup walks the target's mappings in the kernel under its mmap lock, a
 * millisecond or so for a large process, so it is read on this thread and never more than
 * ten times a second, not on the sampler thread.
 * Threads: meter_start/stop from main, meter__wake from the API; the thread reads the config
 * and the registry.
 */
#ifndef PROBED_METER_H
#define PROBED_METER_H

#include <stdatomic.h>

#include "bgthread.h"
#include "config.h"
#include "sample/outbox.h"
#include "sample/targets.h"

struct meter {
    struct targets *reg;
    struct outbox *ob;
    struct config *cfg;
    struct bgthread bg;
    atomic_uint_fast64_t readings, failures; /* targets read, and reads that failed */
    atomic_int_fast64_t last_pass_ns;        /* how long the last pass over all targets took */
};

int meter_start(struct meter *m);
void meter_stop(struct meter *m);
/* memory_interval changed: take it into account now, not at the next wake-up. */
void meter__wake(struct meter *m);

#endif
