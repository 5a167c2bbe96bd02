/*
 * desync.c - the first collective at which a job's ranks disagree: see desync.h.
 */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl/desync.h"
#include "ctl/nodes.h"

#define STR_(x) #x
#define STR(x) STR_(x)

/* Per process (its latest attach), the rows at or after its DESYNC_WINDOW-th latest numbered
 * one (by c10d, or by the NCCL probes from the communicator's creation): the index
 * (target_id, ts_ns) walked backwards, not the whole table. */
const char DESYNC_SQL[] =
    "SELECT t.pid, c.group_name, c.seq, c.op, c.bytes, c.dtype, c.peer"
    " FROM targets t JOIN comm_calls c ON c.target_id = t.id"
    " WHERE t.id = (SELECT max(t2.id) FROM targets t2 WHERE t2.pid = t.pid)"
    " AND c.seq_source IN ('c10d', 'nccl') AND c.ts_ns >= coalesce((SELECT c2.ts_ns"
    " FROM comm_calls c2"
    " WHERE c2.target_id = t.id AND c2.seq_source IN ('c10d', 'nccl') ORDER BY c2.ts_ns DESC"
    " LIMIT 1 OFFSET " STR(DESYNC_WINDOW) " - 1), 0)";

enum { ROW_PID, ROW_GROUP, ROW_SEQ, ROW_OP, ROW_BYTES, ROW_DTYPE, ROW_ROOT };

/* One rank's call: a row of DESYNC_SQL and whose it is. */
struct call {
    const struct desync_rank *who;
    json_t *row;
};

static const char *row_str(json_t *row, int col)
{
    return json_string_value(json_array_get(row, col));
}

static long long row_int(json_t *row, int col)
{
    return (long long)json_integer_value(json_array_get(row, col));
}

/* The op without the trace's " (failed)" (the call raised: it was still this call). */
static size_t op_len(const char *op)
{
    const char *sp = strchr(op, ' ');
    return sp ? (size_t)(sp - op) : strlen(op);
}

static bool op_is(const char *op, const char *name)
{
    return op_len(op) == strlen(name) && strncmp(op, name, op_len(op)) == 0;
}

/* Whether two ranks' calls of one number are the same collective. all_to_all's sizes are the
 * rank's own splits; a root is compared where the op has one. */
static bool same_call(json_t *a, json_t *b)
{
    const char *op = row_str(a, ROW_OP), *op_b = row_str(b, ROW_OP);
    const char *dt = row_str(a, ROW_DTYPE), *dt_b = row_str(b, ROW_DTYPE);
    json_t *root = json_array_get(a, ROW_ROOT), *root_b = json_array_get(b, ROW_ROOT);

    if (!op || !op_b || op_len(op) != op_len(op_b) || strncmp(op, op_b, op_len(op)) != 0)
        return false;
    if (dt && dt_b && strcmp(dt, dt_b) != 0)
        return false;
    if (!op_is(op, "all_to_all") && !op_is(op, "all_to_all_single") &&
        row_int(a, ROW_BYTES) != row_int(b, ROW_BYTES))
        return false;
    if (json_is_integer(root) && json_is_integer(root_b) && !json_equal(root, root_b))
        return false;
    return true;
}

static int cmp_call(const void *x, const void *y)
{
    const struct call *a = x, *b = y;
    int c = strcmp(row_str(a->row, ROW_GROUP), row_str(b->row, ROW_GROUP));
    long long sa = row_int(a->row, ROW_SEQ), sb = row_int(b->row, ROW_SEQ);

    if (c)
        return c;
    if (sa != sb)
        return sa < sb ? -1 : 1;
    return a->who < b->who ? -1 : a->who > b->who;
}

static int rank_of(const struct desync_rank *r)
{
    return r->rank >= 0 ? r->rank : (int)r->pid;
}

/* The calls of one number [from, to), one a rank, as classes of the same call: "calls". */
static json_t *classes(const struct call *calls, size_t from, size_t to)
{
    json_t *out = json_array();
    size_t n = to - from;
    int *cls = calloc(n, sizeof(int)), *ranks = calloc(n, sizeof(int));
    int ncls = 0;

    if (!out || !cls || !ranks)
        goto done;
    for (size_t i = 0; i < n; i++) {
        cls[i] = -1;
        for (size_t j = 0; j < i && cls[i] < 0; j++)
            if (same_call(calls[from + j].row, calls[from + i].row))
                cls[i] = cls[j];
        if (cls[i] < 0)
            cls[i] = ncls++;
    }
    for (int k = 0; k < ncls; k++) {
        json_t *first = NULL, *root;
        size_t nr = 0;
        char ranks_s[256];

        for (size_t i = 0; i < n; i++)
            if (cls[i] == k) {
                first = first ? first : calls[from + i].row;
                ranks[nr++] = rank_of(calls[from + i].who);
            }
        ranks_format(ranks, nr, ranks_s, sizeof(ranks_s));
        root = json_array_get(first, ROW_ROOT);
        json_array_append_new(out, json_pack("{s:s, s:I, s:s%, s:I, s:s?, s:O?}", "ranks", ranks_s,
                                             "count", (json_int_t)nr, "op", row_str(first, ROW_OP),
                                             op_len(row_str(first, ROW_OP)), "bytes",
                                             (json_int_t)row_int(first, ROW_BYTES), "dtype",
                                             row_str(first, ROW_DTYPE), "root",
                                             json_is_integer(root) ? root : NULL));
    }
    /* the most ranks first: the odd ones out after them */
    for (size_t i = 1; i < json_array_size(out); i++)
        for (size_t j = i; j > 0; j--) {
            json_t *a = json_array_get(out, j - 1), *b = json_array_get(out, j);
            if (json_integer_value(json_object_get(a, "count")) >=
                json_integer_value(json_object_get(b, "count")))
                break;
            json_incref(a);
            json_array_set(out, j - 1, b);
            json_array_set_new(out, j, a);
        }
done:
    free(cls);
    free(ranks);
    return out;
}

/* Ranks with calls in @group whose latest one there came before @seq: "5" or "". */
static void not_reached(const struct desync_rank *ranks, size_t n, const char *group, long long seq,
                        char *buf, size_t size)
{
    int *late = calloc(n + 1, sizeof(int));
    size_t nl = 0;

    buf[0] = '\0';
    if (!late)
        return;
    for (size_t i = 0; i < n; i++) {
        long long top = -1;
        bool in_group = false;
        json_t *row;
        size_t k;

        json_array_foreach(ranks[i].calls, k, row)
        {
            const char *g = row_str(row, ROW_GROUP);
            if (g && strcmp(g, group) == 0) {
                in_group = true;
                top = row_int(row, ROW_SEQ) > top ? row_int(row, ROW_SEQ) : top;
            }
        }
        if (in_group && top < seq)
            late[nl++] = rank_of(&ranks[i]);
    }
    ranks_format(late, nl, buf, size);
    free(late);
}

json_t *desync_find(const struct desync_rank *ranks, size_t n)
{
    json_t *out = json_array();
    struct call *calls;
    size_t m = 0, total = 0;

    for (size_t i = 0; i < n; i++)
        total += json_array_size(ranks[i].calls);
    if (!out || !(calls = calloc(total + 1, sizeof(*calls))))
        return out;
    for (size_t i = 0; i < n; i++) {
        json_t *row;
        size_t k;
        json_array_foreach(ranks[i].calls, k, row)
        {
            if (json_array_size(row) > ROW_ROOT && row_str(row, ROW_GROUP) &&
                row_str(row, ROW_OP) && json_is_integer(json_array_get(row, ROW_SEQ)))
                calls[m++] = (struct call){.who = &ranks[i], .row = row};
        }
    }
    qsort(calls, m, sizeof(*calls), cmp_call);
    for (size_t i = 0; i < m;) {
        const char *group = row_str(calls[i].row, ROW_GROUP);
        long long seq = row_int(calls[i].row, ROW_SEQ);
        size_t end = i, uniq = i, nranks = 0;
        bool said = false;
        json_t *d;
        size_t di;

        while (end < m && row_int(calls[end].row, ROW_SEQ) == seq &&
               strcmp(row_str(calls[end].row, ROW_GROUP), group) == 0)
            end++;
        /* one call a rank (a process attached twice would give two) */
        for (size_t k = i; k < end; k++)
            if (k == i || calls[k].who != calls[k - 1].who)
                calls[uniq++] = calls[k], nranks++;
        json_array_foreach(out, di, d) /* one desync a group: its first */
            said |= strcmp(json_string_value(json_object_get(d, "group")), group) == 0;
        if (!said && nranks > 1) {
            json_t *cls = classes(calls, i, uniq);
            if (json_array_size(cls) > 1) {
                char late[256];
                not_reached(ranks, n, group, seq, late, sizeof(late));
                json_array_append_new(out, json_pack("{s:s, s:I, s:o, s:s}", "group", group, "seq",
                                                     (json_int_t)seq, "calls", cls, "not_reached",
                                                     late));
            } else {
                json_decref(cls);
            }
        }
        i = end;
    }
    free(calls);
    return out;
}

/* @r's latest call in @group: its row, or NULL. */
static json_t *latest_in(const struct desync_rank *r, const char *group)
{
    json_t *row, *best = NULL;
    size_t k;

    json_array_foreach(r->calls, k, row)
    {
        const char *g = row_str(row, ROW_GROUP);
        if (g && strcmp(g, group) == 0 && json_is_integer(json_array_get(row, ROW_SEQ)) &&
            (!best || row_int(row, ROW_SEQ) > row_int(best, ROW_SEQ)))
            best = row;
    }
    return best;
}

json_t *desync_counts(const struct desync_rank *ranks, size_t n)
{
    json_t *out = json_array(), *groups = json_array(), *row, *g;
    json_t **latest = calloc(n + 1, sizeof(*latest));
    int *ahead = calloc(n + 1, sizeof(int));
    size_t k, gi;

    if (!out || !groups || !latest || !ahead)
        goto done;
    for (size_t i = 0; i < n; i++) /* the communicators, each once */
        json_array_foreach(ranks[i].calls, k, row)
        {
            const char *group = row_str(row, ROW_GROUP);
            bool seen = false;
            if (!group || strncmp(group, "nccl:", 5) != 0)
                continue;
            json_array_foreach(groups, gi, g) seen |= strcmp(json_string_value(g), group) == 0;
            if (!seen)
                json_array_append_new(groups, json_string(group));
        }
    json_array_foreach(groups, gi, g)
    {
        const char *group = json_string_value(g);
        json_t *top = NULL, *behind = json_array();
        size_t na = 0;
        char ahead_s[256];

        for (size_t j = 0; j < n; j++) {
            latest[j] = latest_in(&ranks[j], group);
            if (latest[j] && (!top || row_int(latest[j], ROW_SEQ) > row_int(top, ROW_SEQ)))
                top = latest[j];
        }
        for (size_t j = 0; j < n; j++) {
            if (!latest[j])
                continue;
            if (row_int(latest[j], ROW_SEQ) == row_int(top, ROW_SEQ))
                ahead[na++] = rank_of(&ranks[j]);
            else
                json_array_append_new(behind,
                                      json_pack("{s:i, s:I, s:I, s:s%}", "rank", ranks[j].rank,
                                                "pid", (json_int_t)ranks[j].pid, "seq",
                                                (json_int_t)row_int(latest[j], ROW_SEQ), "op",
                                                row_str(latest[j], ROW_OP),
                                                op_len(row_str(latest[j], ROW_OP))));
        }
        if (json_array_size(behind) == 0) { /* in step */
            json_decref(behind);
            continue;
        }
        ranks_format(ahead, na, ahead_s, sizeof(ahead_s));
        json_array_append_new(out, json_pack("{s:s, s:I, s:s%, s:s, s:o}", "group", group, "seq",
                                             (json_int_t)row_int(top, ROW_SEQ), "op",
                                             row_str(top, ROW_OP), op_len(row_str(top, ROW_OP)),
                                             "ahead", ahead_s, "behind", behind));
    }
done:
    json_decref(groups);
    free(latest);
    free(ahead);
    return out ? out : json_array();
}

void desync_counts_print(json_t *counts)
{
    json_t *c, *b;
    size_t i, k;

    json_array_foreach(counts, i, c)
    {
        const char *ahead = json_string_value(json_object_get(c, "ahead"));

        printf("on %s, rank%s %s issued collective #%lld (%s)",
               json_string_value(json_object_get(c, "group")), strpbrk(ahead, ",-") ? "s" : "",
               ahead, (long long)json_integer_value(json_object_get(c, "seq")),
               json_string_value(json_object_get(c, "op")));
        json_array_foreach(json_object_get(c, "behind"), k, b)
        {
            long long rank = (long long)json_integer_value(json_object_get(b, "rank"));
            if (rank >= 0)
                printf("; rank %lld's last was #%lld (%s)", rank,
                       (long long)json_integer_value(json_object_get(b, "seq")),
                       json_string_value(json_object_get(b, "op")));
            else
                printf("; pid %lld's last was #%lld (%s)",
                       (long long)json_integer_value(json_object_get(b, "pid")),
                       (long long)json_integer_value(json_object_get(b, "seq")),
                       json_string_value(json_object_get(b, "op")));
        }
        printf("\n");
    }
}

/* "4096 B", "16.0 MiB" */
static void size_text(long long bytes, char *buf, size_t size)
{
    if (bytes < 10 * 1024)
        snprintf(buf, size, "%lld B", bytes);
    else if (bytes < 10 * 1024 * 1024)
        snprintf(buf, size, "%.1f KiB", (double)bytes / 1024);
    else if (bytes < 10LL * 1024 * 1024 * 1024)
        snprintf(buf, size, "%.1f MiB", (double)bytes / (1024 * 1024));
    else
        snprintf(buf, size, "%.1f GiB", (double)bytes / (1024.0 * 1024 * 1024));
}

void desync_print(json_t *desyncs)
{
    json_t *d;
    size_t i;

    json_array_foreach(desyncs, i, d)
    {
        json_t *c;
        size_t k;
        const char *late = json_string_value(json_object_get(d, "not_reached"));

        printf("desync in group %s at #%lld:", json_string_value(json_object_get(d, "group")),
               (long long)json_integer_value(json_object_get(d, "seq")));
        json_array_foreach(json_object_get(d, "calls"), k, c)
        {
            const char *ranks = json_string_value(json_object_get(c, "ranks"));
            const char *dtype = json_string_value(json_object_get(c, "dtype"));
            json_t *root = json_object_get(c, "root");
            char sz[64];

            size_text((long long)json_integer_value(json_object_get(c, "bytes")), sz, sizeof(sz));
            printf("%s rank%s %s %s%s (%s%s%s", k ? "," : "", strpbrk(ranks, ",-") ? "s" : "",
                   ranks, k ? "" : "called ", json_string_value(json_object_get(c, "op")), sz,
                   dtype ? " " : "", dtype ? dtype : "");
            if (json_is_integer(root))
                printf(", root %lld", (long long)json_integer_value(root));
            printf(")");
        }
        if (late && *late)
            printf("; rank%s %s had not reached it", strpbrk(late, ",-") ? "s" : "", late);
        printf(": the ranks disagree from this collective on\n");
    }
}
