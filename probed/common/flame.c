/* flame.c - see flame.h: the profile; each renderer is in a file of its own. */
#define _GNU_SOURCE
#include "common/flame.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MINUTE_NS 60000000000LL

char *flame_counts_sql(const char *target_cond, const struct flame_filter *f, unsigned by)
{
    char tid_cond[40] = "", filter[160], hours[320] = "", minutes[400] = "", late[320] = "";
    const char *key = (by & FLAME_BY_TARGET) && (by & FLAME_BY_THREAD) ? "target_id, tid, stack_id"
                      : (by & FLAME_BY_TARGET)                         ? "target_id, stack_id"
                      : (by & FLAME_BY_THREAD)                         ? "tid, stack_id"
                                                                       : "stack_id";
    long long since = f->since_ns > 0 ? f->since_ns : 0;
    long long until = f->until_ns > 0 ? f->until_ns : INT64_MAX;
    /* whole minutes [m0, m1) and whole hours [h0, h1) of the window (in minutes, hours) */
    long long m0 = (since + MINUTE_NS - 1) / MINUTE_NS, m1 = until / MINUTE_NS;
    long long h0 = (m0 + 59) / 60, h1 = m1 / 60;
    char *sql = NULL;

    if (f->tid)
        snprintf(tid_cond, sizeof(tid_cond), " AND tid = %d", f->tid);
    snprintf(filter, sizeof(filter), " AND stack_id <> 0%s%s%s", tid_cond,
             f->idle ? "" : " AND (state & 1) = 1", f->gil ? " AND (state & 2) = 2" : "");
    if (m1 <= m0) { /* within one minute, or two partial ones: the samples alone */
        m0 = m1 = 0;
        h0 = h1 = 0;
    } else if (h1 <= h0) { /* no whole hour: minutes [m0, m1) */
        snprintf(minutes, sizeof(minutes),
                 " UNION ALL SELECT %s, n FROM stack_counts WHERE %s AND span_s = 60"
                 " AND bucket >= %lld AND bucket < %lld%s",
                 key, target_cond, m0, m1, filter);
    } else { /* minutes [m0, h0*60), hours [h0, h1), minutes [h1*60, m1) */
        snprintf(hours, sizeof(hours),
                 " UNION ALL SELECT %s, n FROM stack_counts WHERE %s AND span_s = 3600"
                 " AND bucket >= %lld AND bucket < %lld%s",
                 key, target_cond, h0, h1, filter);
        snprintf(
            minutes, sizeof(minutes),
            " UNION ALL SELECT %s, n FROM stack_counts WHERE %s AND span_s = 60"
            " AND ((bucket >= %lld AND bucket < %lld) OR (bucket >= %lld AND bucket < %lld))%s",
            key, target_cond, m0, h0 * 60, h1 * 60, m1, filter);
    }
    /* the partial minute at the end (open to now: the buckets count the samples as they
     * are written, and that "minute" is past the end of time) */
    if (m1 > m0 && until != INT64_MAX)
        snprintf(late, sizeof(late),
                 " UNION ALL SELECT %s, 1 FROM samples WHERE %s AND ts_ns >= %lld"
                 " AND ts_ns < %lld%s",
                 key, target_cond, m1 * MINUTE_NS, until, filter);
    if (asprintf(&sql,
                 "SELECT %s, sum(n) AS n FROM ("
                 "SELECT %s, 1 AS n FROM samples WHERE %s AND ts_ns >= %lld AND ts_ns < %lld%s"
                 "%s%s%s) GROUP BY %s",
                 key, key, target_cond, since, m1 > m0 ? m0 * MINUTE_NS : until, filter, hours,
                 minutes, late, key) < 0)
        return NULL;
    return sql;
}

/* The profile and everything it points to, in one block per part. */
struct profile_mem {
    struct flame_profile p;
    struct flame_stack *stacks;
    struct flame_frame *frames;
    json_t *docs; /* the parsed frame arrays: they hold the strings */
};

void flame_profile_free(struct flame_profile *p)
{
    struct profile_mem *m = (struct profile_mem *)p;

    if (!m)
        return;
    free(m->stacks);
    free(m->frames);
    json_decref(m->docs);
    free(m);
}

/* @frames' row of the query, parsed into @m->frames from @at on; -EINVAL, -ENOMEM. */
static int parse_frames(struct profile_mem *m, json_t *doc, size_t at)
{
    json_t *f;
    size_t i;

    json_array_foreach(doc, i, f)
    {
        const char *kind = json_string_value(json_array_get(f, 0));
        const char *func = json_string_value(json_array_get(f, 1));
        const char *file = json_string_value(json_array_get(f, 2));

        if (!kind || !func || !file)
            return -EINVAL;
        m->frames[at + i] = (struct flame_frame){
            .func = func,
            .file = file,
            .line = (int)json_integer_value(json_array_get(f, 3)),
            .first_line = (int)json_integer_value(json_array_get(f, 4)), /* absent: 0 */
            .native = strcmp(kind, "python") != 0 && strcmp(kind, "label") != 0 &&
                      strcmp(kind, "task") != 0,
            .label = strcmp(kind, "label") == 0,
            .task = strcmp(kind, "task") == 0,
        };
    }
    return 0;
}

int flame_profile_from_rows(json_t *rows, struct flame_profile **ret)
{
    size_t n = json_array_size(rows), n_frames = 0, at = 0, i;
    struct profile_mem *m = calloc(1, sizeof(*m));
    json_t *row;
    int r = 0;

    if (!m)
        return -ENOMEM;
    if (!(m->docs = json_array()) || !(m->stacks = calloc(n ? n : 1, sizeof(*m->stacks)))) {
        flame_profile_free(&m->p);
        return -ENOMEM;
    }
    json_array_foreach(rows, i, row)
    {
        const char *text = json_string_value(json_array_get(row, 0));
        json_t *doc = text ? json_loads(text, 0, NULL) : NULL;

        if (!json_is_array(doc) || !json_is_integer(json_array_get(row, 1))) {
            json_decref(doc);
            flame_profile_free(&m->p);
            return -EINVAL;
        }
        json_array_append_new(m->docs, doc);
        n_frames += json_array_size(doc);
    }
    m->frames = calloc(n_frames ? n_frames : 1, sizeof(*m->frames));
    if (!m->frames) {
        flame_profile_free(&m->p);
        return -ENOMEM;
    }
    for (i = 0; i < n && r == 0; i++) {
        json_t *doc = json_array_get(m->docs, i);

        m->stacks[i] = (struct flame_stack){
            .count = json_integer_value(json_array_get(json_array_get(rows, i), 1)),
            .n_frames = json_array_size(doc),
            .frames = m->frames + at,
        };
        m->p.total += m->stacks[i].count;
        r = parse_frames(m, doc, at);
        at += json_array_size(doc);
    }
    if (r < 0) {
        flame_profile_free(&m->p);
        return r;
    }
    m->p.stacks = m->stacks;
    m->p.n_stacks = n;
    *ret = &m->p;
    return 0;
}

char *flame_label(const struct flame_frame *f)
{
    const char *base = strrchr(f->file, '/');
    char *label = NULL;

    if (f->label)
        return strdup(f->func);
    if (f->task)
        return asprintf(&label, "<task %s>", f->func) < 0 ? NULL : label;
    /* a Python frame of line 0 is the whole function (flame_request.no_lines) */
    int r = f->native     ? asprintf(&label, "%s [%s]", f->func, base ? base + 1 : f->file)
            : f->line > 0 ? asprintf(&label, "%s (%s:%d)", f->func, f->file, f->line)
                          : asprintf(&label, "%s (%s)", f->func, f->file);

    return r < 0 ? NULL : label;
}
