/*
 * clock.h - the daemon's clocks: CLOCK_MONOTONIC for periods and deadlines, CLOCK_REALTIME
 * for what is stored and shown. Threads: any. Failure: none.
 */
#ifndef PROBED_CLOCK_H
#define PROBED_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC / CLOCK_REALTIME now, in nanoseconds. */
int64_t mono_ns(void);
int64_t real_ns(void);
/* CLOCK_MONOTONIC in milliseconds, for timing a call. */
double mono_ms(void);

#endif
