/* cluster.c - see cluster.h. */
#define _GNU_SOURCE
#include "ctl/cluster.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/flame.h"
#include "common/units.h"
#include "ctl/client.h"
#include "ctl/commands.h"
#include "ctl/fanout.h"
#include "ctl/flameout.h"
#include "ctl/output.h"
#include "ctl/nodes.h"
#include "ctl/reach.h"

#define MERGE_ROWS_MAX 1000000 /* rows the merge table takes from all nodes */

/* ---- cluster list ---- */

static int cluster_list(struct fanout *fo, const struct reach *r)
{
    json_t *all = json_array();
    int failed;

    fanout_set_all(fo, "GET", "/v1/targets", NULL);
    if (fanout_run(fo) < 0)
        return 1;
    if (!r->json)
        printf("%-16s %-8s %-9s %-5s %-6s %-8s %-10s %s\n", "HOST", "PID", "STATE", "RANK", "RATE",
               "PYTHON", "SAMPLES", "COMMAND");
    for (size_t i = 0; i < fo->n; i++) {
        struct fan_node *node = &fo->nodes[i];
        json_t *targets = json_object_get(node->reply, "targets"), *t;
        size_t k;

        if (!node_ok(node))
            continue;
        json_array_append_new(all, json_pack("{s:s, s:O}", "host", node->host, "targets",
                                             targets ? targets : json_array()));
        if (r->json)
            continue;
        json_array_foreach(targets, k, t)
        {
            json_t *rank = json_object_get(t, "rank");
            char rank_s[16] = "-";
            if (rank)
                snprintf(rank_s, sizeof(rank_s), "%lld", (long long)json_integer_value(rank));
            printf("%-16s %-8lld %-9s %-5s %-6lld %-8s %-10lld %s\n", node->host,
                   (long long)json_integer_value(json_object_get(t, "pid")),
                   json_string_value(json_object_get(t, "state")), rank_s,
                   (long long)json_integer_value(json_object_get(t, "rate_hz")),
                   json_string_value(json_object_get(t, "python_version")),
                   (long long)json_integer_value(
                       json_object_get(json_object_get(t, "stats"), "samples")),
                   json_string_value(json_object_get(t, "cmdline")));
        }
    }
    if (r->json)
        print_json(json_pack("{s:o, s:o}", "nodes", all, "failed", failures_json(fo)));
    else
        json_decref(all);
    failed = say_failures(fo, "cluster list");
    return failed ? 1 : 0;
}

/* ---- cluster attach / detach ---- */

static int cluster_attach(struct fanout *fo, const struct reach *r, json_t *body)
{
    json_t *all = json_array();
    int failed, empty = 0;
    const char *what = json_string_value(json_object_get(body, "match"));

    fanout_set_all(fo, "POST", "/v1/targets", body);
    if (fanout_run(fo) < 0)
        return 1;
    for (size_t i = 0; i < fo->n; i++) {
        struct fan_node *node = &fo->nodes[i];
        json_t *att = json_object_get(node->reply, "attached"), *t;
        json_t *already = json_object_get(node->reply, "already");
        json_t *skipped = json_object_get(node->reply, "skipped");
        json_t *following = json_object_get(node->reply, "following");
        size_t k;

        if (!node_ok(node))
            continue;
        json_object_set_new(node->reply, "host", json_string(node->host));
        json_array_append(all, node->reply);
        if (json_array_size(att) + json_array_size(already) + json_array_size(following) == 0) {
            fprintf(stderr,
                    "probectl cluster attach: %s: no Python process of yours matches %s%s\n",
                    node->host, what ? "" : "job ",
                    what ? what : json_string_value(json_object_get(body, "job")));
            empty++;
        }
        if (json_is_true(json_object_get(node->reply, "truncated")))
            fprintf(stderr,
                    "probectl cluster attach: %s stopped looking (over 1024 processes matched,"
                    " or its /proc took over 2 s): give a narrower pattern\n",
                    node->host);
        if (r->json)
            continue;
        printf("%s: %zu attached, %zu already attached, %zu followed, %zu skipped\n", node->host,
               json_array_size(att), json_array_size(already), json_array_size(following),
               json_array_size(skipped));
        json_array_foreach(att, k, t)
        {
            json_t *rank = json_object_get(t, "rank");
            printf("  pid %-8lld %s%-6lld %s\n",
                   (long long)json_integer_value(json_object_get(t, "pid")),
                   rank ? "rank " : "      ", rank ? (long long)json_integer_value(rank) : 0LL,
                   json_string_value(json_object_get(t, "cmdline")));
        }
        json_array_foreach(following, k, t)
        {
            printf("  pid %-8lld followed (not Python): its Python processes are attached as"
                   " they start: %s\n",
                   (long long)json_integer_value(json_object_get(t, "pid")),
                   json_string_value(json_object_get(t, "cmdline")));
        }
        json_array_foreach(skipped, k, t)
        {
            printf("  pid %-8lld skipped: %s\n",
                   (long long)json_integer_value(json_object_get(t, "pid")),
                   json_string_value(json_object_get(t, "why")));
        }
    }
    if (r->json)
        print_json(json_pack("{s:o, s:o}", "nodes", all, "failed", failures_json(fo)));
    else
        json_decref(all);
    failed = say_failures(fo, "cluster attach");
    return failed || empty ? 1 : 0;
}

static int cluster_detach(struct fanout *fo, const struct reach *r, const char *match)
{
    char path[1024];
    json_t *all = json_array();
    int failed;

    if (match) {
        char *q = curl_easy_escape(NULL, match, 0);
        snprintf(path, sizeof(path), "/v1/targets?match=%s", q ? q : "");
        curl_free(q);
    } else {
        snprintf(path, sizeof(path), "/v1/targets?all=1");
    }
    fanout_set_all(fo, "DELETE", path, NULL);
    if (fanout_run(fo) < 0)
        return 1;
    for (size_t i = 0; i < fo->n; i++) {
        struct fan_node *node = &fo->nodes[i];
        json_t *pids = json_object_get(node->reply, "detached"), *p;
        size_t k;

        if (!node_ok(node))
            continue;
        json_array_append_new(all, json_pack("{s:s, s:O}", "host", node->host, "detached", pids));
        if (r->json)
            continue;
        printf("%s: %zu detached", node->host, json_array_size(pids));
        json_array_foreach(pids, k, p)
        {
            printf("%s%lld", k ? " " : " (pids ", (long long)json_integer_value(p));
        }
        printf("%s\n", json_array_size(pids) ? ")" : "");
    }
    if (r->json)
        print_json(json_pack("{s:o, s:o}", "nodes", all, "failed", failures_json(fo)));
    else
        json_decref(all);
    failed = say_failures(fo, "cluster detach");
    return failed ? 1 : 0;
}

/* ---- cluster query ---- */

/* The union of the nodes' rows, with "host" first; NULL (said) when the nodes' columns
 * disagree. *ret_truncated: a node cut its rows at its row limit. */
static json_t *union_rows(struct fanout *fo, json_t **ret_cols, bool *ret_truncated)
{
    json_t *cols = NULL, *rows = json_array();

    *ret_truncated = false;
    for (size_t i = 0; i < fo->n; i++) {
        struct fan_node *node = &fo->nodes[i];
        json_t *c = json_object_get(node->reply, "columns"), *row;
        size_t k;

        if (!node_ok(node))
            continue;
        if (!cols) {
            cols = json_array();
            json_array_append_new(cols, json_string("host"));
            json_array_extend(cols, c);
        } else if (json_array_size(cols) != json_array_size(c) + 1) {
            fprintf(stderr,
                    "probectl cluster query: %s answered other columns than the others"
                    " (another version?)\n",
                    node->host);
            node->rc = -EPROTO;
            snprintf(node->err, sizeof(node->err), "%s: other columns than the other nodes",
                     node->host);
            continue;
        }
        *ret_truncated |= json_is_true(json_object_get(node->reply, "truncated"));
        json_array_foreach(json_object_get(node->reply, "rows"), k, row)
        {
            json_t *out = json_array();
            json_array_append_new(out, json_string(node->host));
            json_array_extend(out, row);
            json_array_append_new(rows, out);
        }
    }
    *ret_cols = cols ? cols : json_pack("[s]", "host");
    return rows;
}

static int bind_cell(sqlite3_stmt *st, int i, json_t *v)
{
    if (json_is_integer(v))
        return sqlite3_bind_int64(st, i, json_integer_value(v));
    if (json_is_real(v))
        return sqlite3_bind_double(st, i, json_real_value(v));
    if (json_is_string(v))
        return sqlite3_bind_text(st, i, json_string_value(v), -1, SQLITE_TRANSIENT);
    if (json_is_true(v) || json_is_false(v))
        return sqlite3_bind_int(st, i, json_is_true(v));
    return sqlite3_bind_null(st, i);
}

static json_t *cell_json(sqlite3_stmt *st, int i)
{
    switch (sqlite3_column_type(st, i)) {
    case SQLITE_INTEGER:
        return json_integer(sqlite3_column_int64(st, i));
    case SQLITE_FLOAT:
        return json_real(sqlite3_column_double(st, i));
    case SQLITE_NULL:
        return json_null();
    default:
        return json_stringn((const char *)sqlite3_column_text(st, i),
                            (size_t)sqlite3_column_bytes(st, i));
    }
}

/* Runs @merge over table `cluster` (@cols, @rows) in an in-memory SQLite: so that an average
 * over all ranks is one average, not an average of the nodes' averages. 0, or -1 after
 * saying why. */
static int merge_rows(const char *merge, json_t *cols, json_t *rows, json_t **ret_cols,
                      json_t **ret_rows)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    char *sql = NULL, *sep = "";
    size_t len = 0, i, k;
    FILE *f = open_memstream(&sql, &len);
    json_t *c, *row;
    int rc, ncol;

    if (!f || sqlite3_open(":memory:", &db) != SQLITE_OK)
        goto fail;
    fprintf(f, "CREATE TABLE cluster(");
    json_array_foreach(cols, k, c)
    {
        fprintf(f, "%s\"", sep);
        for (const char *p = json_string_value(c); p && *p; p++)
            fprintf(f, *p == '"' ? "\"\"" : "%c", *p);
        fprintf(f, "\"");
        sep = ", ";
    }
    fprintf(f, ");");
    fclose(f);
    f = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
        goto fail;
    free(sql);
    sql = NULL;
    len = 0;
    f = open_memstream(&sql, &len);
    fprintf(f, "INSERT INTO cluster VALUES (");
    for (k = 0; k < json_array_size(cols); k++)
        fprintf(f, "%s?", k ? ", " : "");
    fprintf(f, ")");
    fclose(f);
    f = NULL;
    sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        goto fail;
    json_array_foreach(rows, i, row)
    {
        if (i >= MERGE_ROWS_MAX)
            break;
        for (k = 0; k < json_array_size(cols); k++)
            bind_cell(st, (int)k + 1, json_array_get(row, k));
        if (sqlite3_step(st) != SQLITE_DONE)
            goto fail;
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    st = NULL;
    sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    if (sqlite3_prepare_v2(db, merge, -1, &st, NULL) != SQLITE_OK)
        goto fail;
    ncol = sqlite3_column_count(st);
    *ret_cols = json_array();
    *ret_rows = json_array();
    for (int j = 0; j < ncol; j++)
        json_array_append_new(*ret_cols, json_string(sqlite3_column_name(st, j)));
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        json_t *out = json_array();
        for (int j = 0; j < ncol; j++)
            json_array_append_new(out, cell_json(st, j));
        json_array_append_new(*ret_rows, out);
    }
    if (rc != SQLITE_DONE) {
        json_decref(*ret_cols);
        json_decref(*ret_rows);
        goto fail;
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    free(sql);
    return 0;
fail:
    fprintf(stderr, "probectl cluster query: --merge: %s\n",
            db ? sqlite3_errmsg(db) : "out of memory");
    if (f)
        fclose(f);
    sqlite3_finalize(st);
    sqlite3_close(db);
    free(sql);
    return -1;
}

static int cluster_query(struct fanout *fo, const struct reach *r, const char *sql,
                         const char *merge, const char *format)
{
    json_t *body = json_pack("{s:s}", "sql", sql), *cols, *rows;
    bool truncated;
    int failed;

    fanout_set_all(fo, "POST", "/v1/query", body);
    if (fanout_run(fo) < 0) {
        json_decref(body);
        return 1;
    }
    json_decref(body);
    rows = union_rows(fo, &cols, &truncated);
    if (merge) {
        json_t *mcols, *mrows;
        if (merge_rows(merge, cols, rows, &mcols, &mrows) < 0) {
            json_decref(cols);
            json_decref(rows);
            say_failures(fo, "cluster query");
            return 1;
        }
        json_decref(cols);
        json_decref(rows);
        cols = mcols;
        rows = mrows;
    }
    if (r->json || strcmp(format, "json") == 0)
        print_json(json_pack("{s:O, s:O, s:b, s:o}", "columns", cols, "rows", rows, "truncated",
                             truncated, "failed", failures_json(fo)));
    else if (strcmp(format, "csv") == 0)
        output_rows(OUTPUT_CSV, cols, rows);
    else
        output_sql_table(cols, rows);
    if (truncated)
        fprintf(stderr, "probectl cluster query: a node cut its rows at its row limit\n");
    json_decref(cols);
    json_decref(rows);
    failed = say_failures(fo, "cluster query");
    return failed ? 1 : 0;
}

/* ---- cluster stragglers ---- */

/* Per node, each rank over the window (collective tracing on): a DDP rank's mean step
 * (ddp_step_times: its compute, and how long it waited for the gradient all-reduce once its
 * own backward was done); a rank without DDP, its mean time in the collectives c10d numbers
 * (comm_metrics: a rank the others wait for spends least there). Both are measured on the
 * rank's own clock: no two nodes' clocks are compared. */
#define STRAGGLER_SQL                                                                              \
    "SELECT rank, pid, steps, compute_ms, waited_ms, source FROM ("                                \
    "SELECT target_id, rank, pid, count(*) AS steps,"                                              \
    " round(avg(forward_ms + backward_ms), 3) AS compute_ms,"                                      \
    " round(avg(comm_exposed_ms), 3) AS waited_ms, 'ddp' AS source FROM ddp_step_times"            \
    " WHERE ts_ns > ago('%1$s') AND forward_ms IS NOT NULL GROUP BY target_id"                     \
    " UNION ALL SELECT target_id, rank, pid, count(*), NULL, round(avg(latency_ms), 3),"           \
    " 'collectives' FROM comm_metrics WHERE ts_ns > ago('%1$s') AND seq_source = 'c10d'"           \
    " AND NOT in_flight AND latency_ms IS NOT NULL AND target_id NOT IN (SELECT target_id"         \
    " FROM ddp_step_times WHERE ts_ns > ago('%1$s')) GROUP BY target_id)"
/* All of them, the ones that waited least first: the straggler is the rank the others wait
 * for, so it waits least itself. */
#define STRAGGLER_MERGE                                                                            \
    "SELECT host, rank, pid, steps, compute_ms, waited_ms,"                                        \
    " round(compute_ms - (SELECT avg(compute_ms) FROM cluster), 3) AS compute_vs_mean_ms, source"  \
    " FROM cluster ORDER BY waited_ms, compute_ms DESC"

/* The sentence: who the others wait for, or that none stands out. @rows as STRAGGLER_MERGE. */
static void say_straggler(json_t *rows)
{
    size_t n = json_array_size(rows);
    json_t *first = json_array_get(rows, 0), *second = json_array_get(rows, 1);
    double waited, next_waited, others = 0;

    const char *source;

    if (n < 2) {
        printf("%s\n", n ? "one rank timed: no other to compare it with"
                         : "no DDP steps nor numbered collectives timed in the window (probectl"
                           " torch PID on --comm on the job's ranks)");
        return;
    }
    source = json_string_value(json_array_get(first, 7));
    waited = json_number_value(json_array_get(first, 5));
    next_waited = json_number_value(json_array_get(second, 5));
    for (size_t i = 1; i < n; i++)
        others += json_number_value(json_array_get(json_array_get(rows, i), 5));
    others /= (double)(n - 1);
    /* it stands out when every other rank waits for it: clearly longer than it does */
    if (next_waited - waited < 1.0 || next_waited < 1.5 * waited) {
        printf("no straggler: the ranks wait alike (%.1f to %.1f ms %s)\n", waited,
               json_number_value(json_array_get(json_array_get(rows, n - 1), 5)),
               source && strcmp(source, "ddp") == 0 ? "a step in the gradient all-reduce"
                                                    : "a collective");
        return;
    }
    if (source && strcmp(source, "ddp") == 0)
        printf("rank %lld (%s, pid %lld) is the straggler: the others wait %.1f ms a step for it"
               " in the gradient all-reduce, it waits %.1f ms; it computes %.1f ms a step (%+.1f"
               " ms vs the mean)\n",
               (long long)json_integer_value(json_array_get(first, 1)),
               json_string_value(json_array_get(first, 0)),
               (long long)json_integer_value(json_array_get(first, 2)), others, waited,
               json_number_value(json_array_get(first, 4)),
               json_number_value(json_array_get(first, 6)));
    else
        printf("rank %lld (%s, pid %lld) is the straggler: the others spend %.1f ms in each"
               " collective waiting for it, it spends %.1f ms\n",
               (long long)json_integer_value(json_array_get(first, 1)),
               json_string_value(json_array_get(first, 0)),
               (long long)json_integer_value(json_array_get(first, 2)), others, waited);
}

static int cluster_stragglers(struct fanout *fo, const struct reach *r, const char *since)
{
    char sql[2048];
    json_t *body, *cols, *rows, *mcols, *mrows;
    bool truncated;
    int failed, rc;

    /* each node's own clock: ago() (@since was checked: a duration, no quote) */
    snprintf(sql, sizeof(sql), STRAGGLER_SQL, since ? since : "5m");
    body = json_pack("{s:s}", "sql", sql);
    fanout_set_all(fo, "POST", "/v1/query", body); /* the body is read by the run */
    rc = fanout_run(fo);
    json_decref(body);
    if (rc < 0)
        return 1;
    rows = union_rows(fo, &cols, &truncated);
    if (merge_rows(STRAGGLER_MERGE, cols, rows, &mcols, &mrows) < 0) {
        json_decref(cols);
        json_decref(rows);
        say_failures(fo, "cluster stragglers");
        return 1;
    }
    json_decref(cols);
    json_decref(rows);
    if (r->json) {
        print_json(json_pack("{s:O, s:O, s:o}", "columns", mcols, "rows", mrows, "failed",
                             failures_json(fo)));
    } else {
        say_straggler(mrows);
        if (json_array_size(mrows))
            output_sql_table(mcols, mrows);
    }
    json_decref(mcols);
    json_decref(mrows);
    failed = say_failures(fo, "cluster stragglers");
    return failed ? 1 : 0;
}

/* ---- cluster flamegraph ---- */

/* Per node: each target's distinct stacks (frames root first, as the daemon's own flame graph
 * query gives them), with its rank and pid. */
static char *flame_rows_sql(int64_t since_ns, bool idle)
{
    struct flame_filter f = {.since_ns = since_ns, .idle = idle};
    char *counts = flame_counts_sql("1", &f, FLAME_BY_TARGET), *sql = NULL;

    if (!counts)
        return NULL;
    if (asprintf(&sql,
                 "WITH c AS (%s)"
                 " SELECT t.rank, t.pid, (SELECT json_group_array(json_array(kind, func, file,"
                 " lineno)) FROM (SELECT kind, func, file, lineno FROM stacks"
                 " WHERE stacks.stack_id = c.stack_id ORDER BY depth DESC)) AS frames, c.n"
                 " FROM c JOIN targets t ON t.id = c.target_id",
                 counts) < 0)
        sql = NULL;
    free(counts);
    return sql;
}

/* Every rank's stacks, summed (or each under its rank, --by rank), drawn as @format. */
static int cluster_flamegraph(struct fanout *fo, const char *since, bool by_rank, bool idle,
                              const char *format, const char *out_path)
{
    int64_t since_ns = since ? units_duration_ns(since) : 0;
    char *sql =
        flame_rows_sql(since_ns > 0 ? (int64_t)time(NULL) * 1000000000LL - since_ns : 0, idle);
    json_t *body = sql ? json_pack("{s:s}", "sql", sql) : NULL;
    struct flame_sums sums;
    char title[128];
    size_t ranks = 0;
    int failed, r;

    free(sql);
    if (!body)
        return 1;
    fanout_set_all(fo, "POST", "/v1/query", body);
    r = fanout_run(fo);
    json_decref(body);
    if (r < 0)
        return 1;
    flame_sums_init(&sums);
    for (size_t i = 0; i < fo->n; i++) {
        struct fan_node *node = &fo->nodes[i];
        json_t *row, *seen = json_object();
        size_t k;

        if (!node_ok(node)) {
            json_decref(seen);
            continue;
        }
        json_array_foreach(json_object_get(node->reply, "rows"), k, row)
        {
            json_t *rank = json_array_get(row, 0);
            const char *text = json_string_value(json_array_get(row, 2));
            json_t *frames = text ? json_loads(text, 0, NULL) : NULL;
            char root[300], pid_key[32];

            if (!frames)
                continue;
            if (json_is_integer(rank))
                snprintf(root, sizeof(root), "rank %lld", (long long)json_integer_value(rank));
            else
                snprintf(root, sizeof(root), "%s pid %lld", node->host,
                         (long long)json_integer_value(json_array_get(row, 1)));
            snprintf(pid_key, sizeof(pid_key), "%lld",
                     (long long)json_integer_value(json_array_get(row, 1)));
            json_object_set_new(seen, pid_key, json_true());
            flame_sums_add(&sums, frames, by_rank ? root : NULL,
                           json_integer_value(json_array_get(row, 3)));
            json_decref(frames);
        }
        ranks += json_object_size(seen);
        json_decref(seen);
        if (json_is_true(json_object_get(node->reply, "truncated")))
            fprintf(stderr, "probectl cluster flamegraph: %s cut its stacks at its row limit\n",
                    node->host);
    }
    snprintf(title, sizeof(title), "%zu process%s on %zu node%s%s%s", ranks, ranks == 1 ? "" : "es",
             fo->n, fo->n == 1 ? "" : "s", since ? ", last " : "", since ? since : "");
    r = flame_sums_write(&sums, format, title, out_path, "cluster flamegraph");
    flame_sums_free(&sums);
    failed = say_failures(fo, "cluster flamegraph");
    return failed || r < 0 ? 1 : 0;
}

/* ---- probectl cluster ---- */

static void cluster_usage(FILE *out)
{
    fprintf(out,
            "usage: probectl cluster <command> [--hosts LIST | --hostfile FILE] [options]\n"
            "  list                        every node's attached processes\n"
            "  attach --match PATTERN | --job NAME [--rate HZ] [--native]\n"
            "                              attach every process of the job on every node\n"
            "                              (with --children: ranks and their workers)\n"
            "  detach --match PATTERN | --all\n"
            "  query \"SQL\" [--merge \"SQL over table cluster\"] [--format table|csv|json]\n"
            "                              the query on every node, rows with their host\n"
            "  flamegraph [--by rank] [--since 5m] [--idle] [-o FILE] [--format "
            "svg|folded|speedscope]\n"
            "                              every rank's stacks summed (the format from -o's name:\n"
            "                              .svg, .folded, .json; else svg)\n"
            "  stragglers [--since 5m]     the DDP rank the others wait for (torch on --comm):\n"
            "                              each rank's compute and all-reduce wait per step\n"
            "\n" REACH_HELP);
}

int cluster_main(int argc, char **argv)
{
    static const struct option longopts[] = {{"match", required_argument, NULL, 'm'},
                                             {"job", required_argument, NULL, 'j'},
                                             {"rate", required_argument, NULL, 'r'},
                                             {"native", no_argument, NULL, 'n'},
                                             {"all", no_argument, NULL, 'a'},
                                             {"merge", required_argument, NULL, 'M'},
                                             {"format", required_argument, NULL, 'f'},
                                             {"by", required_argument, NULL, 'b'},
                                             {"since", required_argument, NULL, 's'},
                                             {"idle", no_argument, NULL, 'i'},
                                             {"output", required_argument, NULL, 'o'},
                                             REACH_LONGOPTS,
                                             {NULL, 0, NULL, 0}};
    struct reach r = {0};
    const char *sub, *match = NULL, *jobname = NULL, *merge = NULL, *format = NULL;
    const char *by = NULL, *since = NULL, *out_path = NULL;
    bool native = false, all = false, idle = false;
    struct nodes nodes;
    struct fanout fo;
    int c, bad = 0, rate = 0, rc;

    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        cluster_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    sub = argv[1];
    argc--;
    argv++;
    while ((c = getopt_long(argc, argv, "m:j:r:naM:f:b:s:io:h", longopts, NULL)) != -1) {
        if (reach_option(&r, c, "cluster", &bad))
            continue;
        switch (c) {
        case 'm':
            match = optarg;
            break;
        case 'j':
            jobname = optarg;
            break;
        case 'r':
            rate = atoi(optarg);
            break;
        case 'n':
            native = true;
            break;
        case 'a':
            all = true;
            break;
        case 'M':
            merge = optarg;
            break;
        case 'f':
            format = optarg;
            break;
        case 'b':
            by = optarg;
            break;
        case 's':
            since = optarg;
            break;
        case 'i':
            idle = true;
            break;
        case 'o':
            out_path = optarg;
            break;
        case 'h':
            cluster_usage(stdout);
            return 0;
        default:
            return 2;
        }
    }
    if (bad)
        return 2;
    if (strcmp(sub, "query") == 0 && optind + 1 != argc) {
        fprintf(stderr, "probectl cluster query: expected one SQL statement (quote it)\n");
        return 2;
    }
    if (strcmp(sub, "query") != 0 && optind != argc) {
        fprintf(stderr, "probectl cluster %s: unexpected '%s'\n", sub, argv[optind]);
        return 2;
    }
    if (strcmp(sub, "attach") == 0 && !match == !jobname) {
        fprintf(stderr, "probectl cluster attach: give --match PATTERN or --job NAME\n");
        return 2;
    }
    if (strcmp(sub, "detach") == 0 && !match == !all) {
        fprintf(stderr, "probectl cluster detach: give --match PATTERN or --all\n");
        return 2;
    }
    if (by && strcmp(by, "rank") != 0) {
        fprintf(stderr, "probectl cluster flamegraph: --by takes 'rank'\n");
        return 2;
    }
    if (since && units_duration_ns(since) <= 0) {
        fprintf(stderr, "probectl cluster: --since must be a duration like 5m\n");
        return 2;
    }
    if (strcmp(sub, "flamegraph") == 0 && !format)
        format = flame_format_of(out_path); /* -o x.folded writes folded text */
    if (!format)
        format = "table";
    if (strcmp(sub, "flamegraph") == 0 && !flame_format_ok(format)) {
        fprintf(stderr,
                "probectl cluster flamegraph: --format must be svg, folded or speedscope\n");
        return 2;
    }
    if (strcmp(sub, "flamegraph") != 0 && strcmp(format, "table") != 0 &&
        strcmp(format, "csv") != 0 && strcmp(format, "json") != 0) {
        fprintf(stderr, "probectl cluster query: --format must be table, csv or json\n");
        return 2;
    }
    if (strcmp(sub, "list") != 0 && strcmp(sub, "attach") != 0 && strcmp(sub, "detach") != 0 &&
        strcmp(sub, "query") != 0 && strcmp(sub, "flamegraph") != 0 &&
        strcmp(sub, "stragglers") != 0) {
        fprintf(stderr, "probectl cluster: unknown command '%s'\n\n", sub);
        cluster_usage(stderr);
        return 2;
    }
    if ((rc = reach_nodes(&r, "cluster", &nodes, &fo)) != 0)
        return rc;
    if (strcmp(sub, "list") == 0) {
        rc = cluster_list(&fo, &r);
    } else if (strcmp(sub, "attach") == 0) {
        json_t *body = json_pack("{s:s, s:b}", match ? "match" : "job", match ? match : jobname,
                                 "native", native);
        if (rate > 0)
            json_object_set_new(body, "rate", json_integer(rate));
        rc = cluster_attach(&fo, &r, body);
        json_decref(body);
    } else if (strcmp(sub, "detach") == 0) {
        rc = cluster_detach(&fo, &r, match);
    } else if (strcmp(sub, "query") == 0) {
        rc = cluster_query(&fo, &r, argv[optind], merge, format);
    } else if (strcmp(sub, "stragglers") == 0) {
        rc = cluster_stragglers(&fo, &r, since);
    } else {
        rc = cluster_flamegraph(&fo, since, by != NULL, idle, format, out_path);
    }
    fanout_free(&fo);
    nodes_free(&nodes);
    return rc;
}
