/*
 * flame.h - flame graphs from stored samples: folded stacks and an interactive SVG.
 *
 * flame_sql() is the query (run through query.h, so scope and time limits apply) that
 * returns one row per distinct stack: its frames root first joined by ';', and its count.
 * flame_folded() writes those rows as folded text (Brendan Gregg's format, which speedscope,
 * inferno and flamegraph.pl read); flame_svg() renders them: hover for counts and share,
 * click to zoom, Ctrl-F/"Search" to highlight a regex.
 * Threads: any. Memory: results are malloc'd, the caller frees them.
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

/* @rows: the query result's "rows" ([folded, count] pairs). Returns malloc'd text. */
char *flame_folded(json_t *rows, size_t *ret_len);
char *flame_svg(json_t *rows, const char *title, size_t *ret_len);
/* "func (file:line)" (a frame of a folded stack) -> func, file (NULL when the label has no
 * "(file:line)"), line. Both strings malloc'd; -1 when out of memory. */
int flame_split_label(const char *label, size_t len, char **ret_func, char **ret_file,
                      int *ret_line);

/* speedscope's JSON file format (a "sampled" profile), for speedscope.app. */
char *flame_speedscope(json_t *rows, const char *title, size_t *ret_len);

#endif
