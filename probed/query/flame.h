/*
 * flame.h - flame graphs from stored samples: the profile (typed rows) and its renderers.
 *
 * flame_sql() is the query (run through query.h, so scope and time limits apply) that
 * returns one row per distinct stack: its frames root first, as a JSON array of [kind, func,
 * file, line] (each field whole, whatever characters a name holds), and its count.
 * flame_profile_from_rows() turns those rows into a struct flame_profile, which every
 * renderer takes, each in its own file: flame_folded.c (Brendan Gregg's folded text, which
 * speedscope, inferno and flamegraph.pl read), flame_svg.c (an interactive SVG: hover for
 * counts and share, click to zoom, Ctrl-F/"Search" to highlight a regex),
 * flame_speedscope.c (speedscope's JSON) and pprof.c (pprof's protobuf).
 * Threads: any. Memory: a profile owns its strings; the renderers' results are malloc'd,
 * the caller frees them. Failure: NULL (or -ENOMEM / -EINVAL): out of memory, or rows that
 * are not the query's.
 */
#ifndef PROBED_FLAME_H
#define PROBED_FLAME_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct flame_request {
    pid_t pid;        /* required */
    int64_t since_ns; /* unix ns; 0: all stored samples */
    pid_t tid;        /* 0: every thread */
    bool idle;        /* also samples of threads not on CPU (py-spy --idle) */
    const char *title;
    int64_t period_ns; /* the target's sampling period (pprof's cpu time per sample) */
};

/* The SQL text for @req (malloc'd). */
char *flame_sql(const struct flame_request *req);

/* One frame of a stored stack, as the store has it. */
struct flame_frame {
    const char *func; /* borrowed from the profile */
    const char *file; /* Python: the source file; native: the object's path */
    int line;         /* native: 0 */
    bool native;
};

/* One distinct stack and how many samples had it. */
struct flame_stack {
    int64_t count;
    size_t n_frames;
    const struct flame_frame *frames; /* root first */
};

struct flame_profile {
    const struct flame_stack *stacks;
    size_t n_stacks;
    int64_t total; /* samples */
};

/* @rows: the query result's "rows" ([frames, count] pairs). -ENOMEM, or -EINVAL when a row is
 * not one of flame_sql()'s. */
int flame_profile_from_rows(json_t *rows, struct flame_profile **ret);
void flame_profile_free(struct flame_profile *p); /* NULL is a no-op */

/* A frame's label in folded text and the SVG: "func (file:line)", or "func [object]" with the
 * object's base name for a native frame. malloc'd; NULL when out of memory. */
char *flame_label(const struct flame_frame *f);

/* The renderers. */
char *flame_folded(const struct flame_profile *p, size_t *ret_len);
char *flame_svg(const struct flame_profile *p, const char *title, size_t *ret_len);
/* speedscope's JSON file format (a "sampled" profile), for speedscope.app. */
char *flame_speedscope(const struct flame_profile *p, const char *title, size_t *ret_len);

#endif
