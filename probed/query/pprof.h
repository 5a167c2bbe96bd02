/*
 * pprof.h - a flame graph's stacks as a pprof profile: gzipped protobuf (pprof/profile.proto,
 * protobuf-c, zlib) that `go tool pprof`, Pyroscope and Parca read.
 *
 * Each frame (function, file, line; a native one: symbol, object, 0) is a Location with one
 * Line (its Function's start_line the def's line); functions are deduplicated by (name, file);
 * one Mapping, the program, holds them all; samples are labelled pid, rank, thread and
 * thread_id (a flame_request.by_thread profile). Two sample types: samples/count and
 * cpu/nanoseconds (count x the sampling period). Threads: any. Memory: the result is malloc'd, the
 * caller frees it.
 */
#ifndef PROBED_PPROF_H
#define PROBED_PPROF_H

#include <stddef.h>
#include <stdint.h>

#include "query/flame.h"

/* What the profile is of: its samples' labels pid and rank (-1: none), and the main binary's
 * mapping (the program's path: pprof tools name the profile by it). */
struct pprof_meta {
    int64_t pid;
    int64_t rank;
    const char *binary;
};

/* @p's stacks, taken with @period_ns between samples, at @time_ns (@meta may be NULL). NULL
 * when out of memory. */
uint8_t *pprof_of(const struct flame_profile *p, int64_t period_ns, int64_t time_ns,
                  const struct pprof_meta *meta, size_t *ret_len);

#endif
