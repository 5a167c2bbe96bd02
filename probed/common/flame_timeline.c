/*
 * flame_timeline.c - each thread's samples in time order (flame.h): speedscope's per-thread
 * sampled profiles and a Chrome trace (Perfetto, chrome://tracing), from a window's stacks and
 * samples as two queries return them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/flame.h"

struct flame_timeline {
    struct flame_profile *stacks; /* the distinct stacks, in @stack_rows' order */
    json_t *by_id;                /* stack_id (decimal text) -> index in stacks */
    json_t *frames;               /* the distinct frames: {name, file, line} */
    json_t *stack_frames;         /* per stack: its frames' indices in @frames, root first */
    json_t *samples;              /* the sample rows (a reference) */
    int64_t period_ns;
    int64_t t0; /* the first sample's time: times are written from it */
};

void flame_timeline_free(struct flame_timeline *t)
{
    if (!t)
        return;
    flame_profile_free(t->stacks);
    json_decref(t->by_id);
    json_decref(t->frames);
    json_decref(t->stack_frames);
    json_decref(t->samples);
    free(t);
}

/* The index of frame @f in t->frames, added when new; @index maps labels -> indices. */
static json_int_t frame_index(struct flame_timeline *t, json_t *index, const struct flame_frame *f)
{
    char *key = flame_label(f);
    json_t *known = key ? json_object_get(index, key) : NULL;
    json_int_t i = known ? json_integer_value(known) : (json_int_t)json_array_size(t->frames);

    if (key && !known) {
        /* the function's name (speedscope shows the file and line beside it); a task's
         * frame its "<task NAME>", a label as it is */
        json_t *frame = json_pack("{s:s}", "name", f->task ? key : f->func);

        if (!f->label) /* a label ("rank 3") names no code */
            json_object_set_new(frame, "file", json_string(f->file));
        if (!f->label && !f->native && f->line > 0)
            json_object_set_new(frame, "line", json_integer(f->line));
        json_array_append_new(t->frames, frame);
        json_object_set_new(index, key, json_integer(i));
    }
    free(key);
    return i;
}

/* A sample row's fields: [pid, tid, thread name, ts_ns, stack_id]. */
static int64_t row_int(json_t *row, size_t i)
{
    return json_integer_value(json_array_get(row, i));
}

/* The stack index of sample row @row; -1 when its stack is not among the rows read. */
static long sample_stack(const struct flame_timeline *t, json_t *row)
{
    char key[24];
    json_t *v;

    snprintf(key, sizeof(key), "%" PRId64, row_int(row, 4));
    v = json_object_get(t->by_id, key);
    return v ? (long)json_integer_value(v) : -1;
}

int flame_timeline_from_rows(json_t *stack_rows, json_t *sample_rows, int64_t period_ns,
                             struct flame_timeline **ret)
{
    struct flame_timeline *t = calloc(1, sizeof(*t));
    json_t *profile_rows = json_array(), *index = json_object(), *row;
    size_t i;
    int r = -ENOMEM;

    if (!t || !profile_rows || !index)
        goto out;
    t->by_id = json_object();
    t->frames = json_array();
    t->stack_frames = json_array();
    t->samples = json_incref(sample_rows);
    t->period_ns = period_ns > 0 ? period_ns : 10000000;
    if (!t->by_id || !t->frames || !t->stack_frames)
        goto out;
    r = -EINVAL;
    json_array_foreach(stack_rows, i, row)
    {
        char key[24];

        if (!json_is_integer(json_array_get(row, 0)) || !json_is_string(json_array_get(row, 1)))
            goto out;
        snprintf(key, sizeof(key), "%" PRId64, row_int(row, 0));
        json_object_set_new(t->by_id, key, json_integer((json_int_t)i));
        json_array_append_new(profile_rows, json_pack("[O, i]", json_array_get(row, 1), 1));
    }
    if ((r = flame_profile_from_rows(profile_rows, &t->stacks)) < 0)
        goto out;
    for (i = 0; i < t->stacks->n_stacks; i++) {
        const struct flame_stack *st = &t->stacks->stacks[i];
        json_t *ix = json_array();

        for (size_t k = 0; k < st->n_frames; k++)
            json_array_append_new(ix, json_integer(frame_index(t, index, &st->frames[k])));
        json_array_append_new(t->stack_frames, ix);
    }
    r = -EINVAL;
    t->t0 = INT64_MAX;
    json_array_foreach(sample_rows, i, row)
    {
        if (json_array_size(row) < 5 || !json_is_integer(json_array_get(row, 3)))
            goto out;
        if (row_int(row, 3) < t->t0)
            t->t0 = row_int(row, 3);
    }
    if (t->t0 == INT64_MAX)
        t->t0 = 0;
    r = 0;
out:
    json_decref(profile_rows);
    json_decref(index);
    if (r < 0) {
        flame_timeline_free(t);
        return r;
    }
    *ret = t;
    return 0;
}

/* Whether sample rows @a and @b are of one thread (pid and tid). */
static bool same_thread(json_t *a, json_t *b)
{
    return a && b && row_int(a, 0) == row_int(b, 0) && row_int(a, 1) == row_int(b, 1);
}

/* A thread's name as a profile or track shows it: "MainThread (pid 7, tid 9)". */
static char *thread_title(json_t *row)
{
    const char *name = json_string_value(json_array_get(row, 2));
    char *s = NULL;

    if (asprintf(&s, "%s (pid %" PRId64 ", tid %" PRId64 ")", name && *name ? name : "thread",
                 row_int(row, 0), row_int(row, 1)) < 0)
        return NULL;
    return s;
}

static char *dump(json_t *doc, size_t *ret_len)
{
    char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;

    json_decref(doc);
    *ret_len = text ? strlen(text) : 0;
    return text;
}

char *flame_timeline_speedscope(const struct flame_timeline *t, const char *title, size_t *ret_len)
{
    json_t *profiles = json_array(), *p = NULL, *samples = NULL, *weights = NULL, *row;
    json_t *prev = NULL;
    size_t i;

    /* one sampled profile per thread; each sample weighs one sampling period, in ns from the
     * first sample of all, so the threads' profiles line up */
    json_array_foreach(t->samples, i, row)
    {
        long st = sample_stack(t, row);
        int64_t at = row_int(row, 3) - t->t0;

        if (!same_thread(prev, row)) {
            char *name = thread_title(row);

            p = json_pack("{s:s, s:s?, s:s, s:I, s:I, s:[], s:[]}", "type", "sampled", "name", name,
                          "unit", "nanoseconds", "startValue", (json_int_t)at, "endValue",
                          (json_int_t)at, "samples", "weights");
            free(name);
            if (!p)
                break;
            json_array_append_new(profiles, p);
            samples = json_object_get(p, "samples");
            weights = json_object_get(p, "weights");
        }
        prev = row;
        if (st < 0)
            continue;
        json_array_append(samples, json_array_get(t->stack_frames, (size_t)st));
        json_array_append_new(weights, json_integer(t->period_ns));
        json_object_set_new(p, "endValue", json_integer(at + t->period_ns));
    }
    return dump(json_pack("{s:s, s:s, s:s?, s:s, s:i, s:{s:O}, s:o}", "$schema",
                          "https://www.speedscope.app/file-format-schema.json", "version", "0.0.1",
                          "name", title, "exporter", "probed", "activeProfileIndex", 0, "shared",
                          "frames", t->frames, "profiles", profiles),
                ret_len);
}

/* The open frames of one thread as the Chrome trace is written. */
struct open_frame {
    json_int_t frame;
    int64_t since; /* ns from t0 */
};

/* Closes @open's frames from depth @keep out, at @at: one complete ("X") event each. */
static void close_frames(const struct flame_timeline *t, json_t *events, json_t *row,
                         struct open_frame *open, size_t *depth, size_t keep, int64_t at)
{
    while (*depth > keep) {
        struct open_frame *o = &open[--*depth];
        json_t *f = json_array_get(t->frames, (size_t)o->frame);
        json_t *args = json_object();

        if (json_object_get(f, "file"))
            json_object_set(args, "file", json_object_get(f, "file"));
        if (json_object_get(f, "line"))
            json_object_set(args, "line", json_object_get(f, "line"));
        json_array_append_new(events,
                              json_pack("{s:O, s:s, s:f, s:f, s:I, s:I, s:o}", "name",
                                        json_object_get(f, "name"), "ph", "X", "ts", o->since / 1e3,
                                        "dur", (at - o->since) / 1e3, "pid", row_int(row, 0), "tid",
                                        row_int(row, 1), "args", args));
    }
}

char *flame_timeline_chrome(const struct flame_timeline *t, size_t *ret_len)
{
    json_t *events = json_array(), *row, *prev = NULL, *named = json_object();
    struct open_frame *open = NULL;
    size_t depth = 0, cap = 0, i;
    int64_t last = 0;

    /* a frame runs from the first sample it is on to the first it is not on (or one period
     * past the thread's last sample before a gap of two periods: not sampled there, so
     * not known to run) */
    json_array_foreach(t->samples, i, row)
    {
        long st = sample_stack(t, row);
        int64_t at = row_int(row, 3) - t->t0;
        json_t *ix = st >= 0 ? json_array_get(t->stack_frames, (size_t)st) : NULL;
        size_t n = json_array_size(ix), keep = 0;
        char key[48];

        if (!same_thread(prev, row)) {
            char *name = thread_title(row);

            if (prev)
                close_frames(t, events, prev, open, &depth, 0, last + t->period_ns);
            snprintf(key, sizeof(key), "%" PRId64, row_int(row, 0));
            if (!json_object_get(named, key)) {
                char process[40];

                snprintf(process, sizeof(process), "pid %" PRId64, row_int(row, 0));
                json_array_append_new(events, json_pack("{s:s, s:s, s:I, s:{s:s}}", "name",
                                                        "process_name", "ph", "M", "pid",
                                                        row_int(row, 0), "args", "name", process));
                json_object_set_new(named, key, json_true());
            }
            json_array_append_new(events,
                                  json_pack("{s:s, s:s, s:I, s:I, s:{s:s?}}", "name", "thread_name",
                                            "ph", "M", "pid", row_int(row, 0), "tid",
                                            row_int(row, 1), "args", "name", name));
            free(name);
        } else if (at - last > 2 * t->period_ns) {
            close_frames(t, events, row, open, &depth, 0, last + t->period_ns);
        }
        prev = row;
        last = at;
        if (n > cap) {
            struct open_frame *bigger = realloc(open, n * sizeof(*open));

            if (!bigger)
                break;
            open = bigger;
            cap = n;
        }
        while (keep < depth && keep < n &&
               open[keep].frame == json_integer_value(json_array_get(ix, keep)))
            keep++;
        close_frames(t, events, row, open, &depth, keep, at);
        for (; depth < n; depth++)
            open[depth] = (struct open_frame){json_integer_value(json_array_get(ix, depth)), at};
    }
    if (prev)
        close_frames(t, events, prev, open, &depth, 0, last + t->period_ns);
    free(open);
    json_decref(named);
    return dump(json_pack("{s:o, s:s, s:{s:I, s:s}}", "traceEvents", events, "displayTimeUnit",
                          "ms", "otherData", "start_unix_ns", (json_int_t)t->t0, "exporter",
                          "probed"),
                ret_len);
}

char *flame_timeline_sql(const char *targets_cond, const struct flame_filter *f, bool stacks,
                         bool no_lines)
{
    long long since = f->since_ns > 0 ? f->since_ns : 0;
    long long until = f->until_ns > 0 ? f->until_ns : INT64_MAX;
    char where[512], *sql = NULL;

    snprintf(where, sizeof(where),
             " FROM targets t JOIN samples s ON s.target_id = t.id WHERE (%s) AND s.ts_ns >= %lld"
             " AND s.ts_ns < %lld AND s.stack_id <> 0%s%s%s",
             targets_cond, since, until, f->idle ? "" : " AND (s.state & 1) = 1",
             f->gil ? " AND (s.state & 2) = 2" : "", f->tid ? " AND s.tid = " : "");
    if (f->tid)
        snprintf(where + strlen(where), sizeof(where) - strlen(where), "%d", f->tid);
    if (stacks)
        return asprintf(&sql,
                        "SELECT d.stack_id, (SELECT json_group_array(json_array(kind, func, file,"
                        " lineno)) FROM (SELECT kind, func, file, %s AS lineno FROM stacks"
                        " WHERE stacks.stack_id = d.stack_id ORDER BY depth DESC))"
                        " FROM (SELECT DISTINCT s.stack_id%s) d",
                        no_lines ? "CASE kind WHEN 'python' THEN 0 ELSE lineno END" : "lineno",
                        where) < 0
                   ? NULL
                   : sql;
    return asprintf(
               &sql,
               "SELECT t.pid, s.tid, coalesce((SELECT coalesce(nullif(h.name, ''), h.os_name)"
               " FROM threads h WHERE h.target_id = s.target_id AND h.tid = s.tid), '') AS name,"
               " s.ts_ns, s.stack_id%s ORDER BY t.pid, s.tid, s.ts_ns",
               where) < 0
               ? NULL
               : sql;
}
