/*
 * flame.h - a target's flame graph from its stored samples: the query.
 *
 * flame_sql() is the query (run through query.h, so scope and time limits apply) that
 * returns one row per distinct stack: its frames root first, as a JSON array of [kind, func,
 * file, line, first line] (each field whole, whatever characters a name holds), and its count: the
 * rows common/flame.h's flame_profile_from_rows() takes, for its renderers and pprof.c's. Threads:
 * any. Memory: the caller frees the text. Failure: NULL, out of memory.
 */
#ifndef PROBED_FLAME_H
#define PROBED_FLAME_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/flame.h"

struct flame_request {
    pid_t pid;                  /* required */
    struct flame_filter filter; /* the window, thread, idle (py-spy --idle), GIL */
    bool by_task;               /* rooted by asyncio task: a stack with a task frame cut below it */
    bool by_thread;             /* rooted by thread: a "label" frame naming it under each stack */
    bool no_lines;              /* a Python frame per function, not per line (its line 0) */
    const char *title;
    int64_t period_ns; /* the target's sampling period (pprof's cpu time per sample) */
};

/* The SQL text for @req (malloc'd). */
char *flame_sql(const struct flame_request *req);

#endif
