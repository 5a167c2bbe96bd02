/*
 * flameout.h - probectl's flame graphs of many processes (`cluster flamegraph`, `hang
 * --flamegraph`): stacks summed by their frames, then drawn by common/flame.h's renderers,
 * the same the daemon draws one target's with.
 * Threads: the caller's. Memory: a struct flame_sums holds its stacks until flame_sums_free().
 * Failure: -errno after saying why on stderr.
 */
#ifndef PROBECTL_FLAMEOUT_H
#define PROBECTL_FLAMEOUT_H

#include <jansson.h>
#include <stdint.h>

struct flame_sums {
    json_t *counts; /* frames text (a JSON array, root first) -> count */
};

void flame_sums_init(struct flame_sums *s);
/* Adds @count samples of @frames (root first; borrowed), under a "label" frame @root when
 * not NULL ("rank 3"). */
void flame_sums_add(struct flame_sums *s, json_t *frames, const char *root, int64_t count);
/* Writes them to @path (NULL: stdout) as "svg", "folded" or "speedscope". */
int flame_sums_write(const struct flame_sums *s, const char *format, const char *title,
                     const char *path, const char *cmd);
void flame_sums_free(struct flame_sums *s);

/* Whether @format is one flame_sums_write() takes. */
int flame_format_ok(const char *format);

/* The format a file's name asks for: .folded, .collapsed or .txt folded; .chrometrace.json,
 * .trace.json or .perfetto.json chrometrace; other .json speedscope; .pb, .pb.gz or .pprof
 * pprof; else svg. */
const char *flame_format_of(const char *path);

#endif
