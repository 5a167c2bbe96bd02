/*
 * pprof.h - a flame graph's stacks as a pprof profile: gzipped protobuf (pprof/profile.proto,
 * protobuf-c, zlib) that `go tool pprof`, Pyroscope and Parca read.
 *
 * Each frame (function, file, line; a native one: symbol, object, 0) is a Location with one
 * Line; functions are deduplicated by (name, file). Two sample types: samples/count and
 * cpu/nanoseconds (count x the sampling period). Threads: any. Memory: the result is malloc'd, the
 * caller frees it.
 */
#ifndef PROBED_PPROF_H
#define PROBED_PPROF_H

#include <stddef.h>
#include <stdint.h>

#include "query/flame.h"

/* @p's stacks, taken with @period_ns between samples, at @time_ns. NULL when out of memory. */
uint8_t *pprof_of(const struct flame_profile *p, int64_t period_ns, int64_t time_ns,
                  size_t *ret_len);

#endif
