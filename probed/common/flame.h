/*
 * flame.h - a flame graph's profile (distinct stacks and their counts) and its renderers, for
 * the daemon (a target's stored samples, query/flame.h) and probectl (every rank of a job,
 * `probectl cluster flamegraph`, `probectl hang --flame`).
 *
 * flame_profile_from_rows() takes rows of [frames, count], the frames root first as the
 * text of a JSON array of [kind, func, file, line] (each field whole, whatever characters a
 * name holds; kind "python", "native", or "label" for a frame that only names a group). Each
 * renderer is in its own file: flame_folded.c (Brendan Gregg's folded text, which speedscope,
 * inferno and flamegraph.pl read), flame_svg.c (an interactive SVG: hover for counts and share,
 * click to zoom, Ctrl-F/"Search" to highlight a regex), flame_speedscope.c (speedscope's JSON),
 * flame_json.c (frames and stacks as indices, for the web view).
 * Threads: any. Memory: a profile owns its strings; the renderers' results are malloc'd, the
 * caller frees them. Failure: NULL (or -ENOMEM / -EINVAL): out of memory, or rows that are
 * not [frames, count].
 */
#ifndef PROBED_COMMON_FLAME_H
#define PROBED_COMMON_FLAME_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Which samples a flame graph counts. */
struct flame_filter {
    int64_t since_ns; /* unix ns, from (inclusive); 0: the first stored sample */
    int64_t until_ns; /* unix ns, to (exclusive); 0: now */
    int tid;          /* 0: every thread */
    bool idle;        /* also samples of threads not on a CPU */
    bool gil;         /* only samples of threads holding the GIL */
};

/*
 * The SQL of the samples' counts per stack in @f's window, from stack_counts
 * (schema/0012_stack_counts.sql): its hours wholly inside the window, its minutes wholly
 * inside it but not in those hours, and the samples themselves in the partial minutes at
 * either end. Its rows: [target_id,] [tid,] stack_id, n (target_id with FLAME_BY_TARGET in
 * @by, tid with FLAME_BY_THREAD). @target_cond selects the targets (an SQL condition on
 * target_id). Malloc'd; NULL when out of memory.
 */
#define FLAME_BY_TARGET 1u
#define FLAME_BY_THREAD 2u
char *flame_counts_sql(const char *target_cond, const struct flame_filter *f, unsigned by);

/* One frame of a stored stack, as the store has it. */
struct flame_frame {
    const char *func; /* borrowed from the profile */
    const char *file; /* Python: the source file; native: the object's path */
    int line;         /* native: 0 */
    int first_line;   /* Python: the function's first line (its def), when the rows had it; 0 */
    bool native;
    bool label; /* kind "label": a frame of ours naming what is under it ("rank 3"), func alone */
    bool task;  /* kind "task": the asyncio task the frames above ran for, "<task NAME>" */
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

/* @rows: [frames, count] pairs (a query result's "rows"). -ENOMEM, or -EINVAL when a row is
 * not one. */
int flame_profile_from_rows(json_t *rows, struct flame_profile **ret);
void flame_profile_free(struct flame_profile *p); /* NULL is a no-op */

/* A frame's label in folded text and the SVG: "func (file:line)" ("func (file)" when its line
 * is 0: the whole function), or "func [object]" with the object's base name for a native
 * frame. malloc'd; NULL when out of memory. */
char *flame_label(const struct flame_frame *f);

/* The renderers. */
char *flame_folded(const struct flame_profile *p, size_t *ret_len);
char *flame_svg(const struct flame_profile *p, const char *title, size_t *ret_len);
/* For programs (the web view): distinct frames and stacks of their indices (flame_json.c). */
char *flame_json(const struct flame_profile *p, const char *title, size_t *ret_len);
/* speedscope's JSON file format (a "sampled" profile), for speedscope.app. */
char *flame_speedscope(const struct flame_profile *p, const char *title, size_t *ret_len);

/*
 * A timeline: each thread's samples in time order (flame_timeline.c), for the formats that
 * show time: speedscope's per-thread sampled profiles (ns, one period a sample) and a Chrome
 * trace (Perfetto: a complete event per frame, from the first sample it is on to the first
 * it is not). Built from two query results of flame_timeline_sql(): @stack_rows [stack_id,
 * frames] and @sample_rows [pid, tid, thread name, ts_ns, stack_id] in pid, tid, time order
 * (referenced, not copied). -ENOMEM, or -EINVAL when a row is not one.
 */
struct flame_timeline;
int flame_timeline_from_rows(json_t *stack_rows, json_t *sample_rows, int64_t period_ns,
                             struct flame_timeline **ret);
void flame_timeline_free(struct flame_timeline *t); /* NULL is a no-op */
char *flame_timeline_speedscope(const struct flame_timeline *t, const char *title, size_t *ret_len);
char *flame_timeline_chrome(const struct flame_timeline *t, size_t *ret_len);
/* The SQL of the stacks (@stacks; with @no_lines each Python frame's line 0: the whole
 * function) or the samples of the targets @targets_cond selects (an SQL condition on targets
 * t: "t.pid = 7") in @f's window. Malloc'd; NULL when out of memory. */
char *flame_timeline_sql(const char *targets_cond, const struct flame_filter *f, bool stacks,
                         bool no_lines);

#endif
