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
/* The first multiple of @period_ns at or after @t_ns: every target sampled at one rate (or at
 * rates that divide each other) is due at the same instants, so that one wake-up of the
 * sampler serves them all, and each one's samples are evenly spaced (store/blocks.h). */
int64_t clock_tick_at_or_after(int64_t t_ns, int64_t period_ns);

#endif
