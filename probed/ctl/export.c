/* export.c - see export.h. */
#define _GNU_SOURCE
#include "ctl/export.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl/client.h"

#define PAGE_ROWS 100000 /* rows a query of the copy asks for */

/* What is copied: all of the caller's, or the targets of some pids, from a time on. */
struct export
{
    const char *socket;
    sqlite3 *db;
    char *targets_cond; /* an SQL condition on a target_id column ("1": every one) */
    char *pids_cond;    /* the same on targets' pid ("1") */
    int64_t since_ns;   /* 0: from the first row */
    long long rows;     /* copied so far */
};

/* The rows of @sql through the daemon (the caller's scope), or NULL after saying why; *@keep
 * holds the reply. */
static json_t *remote_rows(const struct export *ex, const char *sql, json_t **keep)
{
    json_t *body = json_pack("{s:s}", "sql", sql);

    *keep = client_request(ex->socket, "POST", "/v1/query", body);
    json_decref(body);
    return *keep ? json_object_get(*keep, "rows") : NULL;
}

static int exec_local(const struct export *ex, const char *sql)
{
    char *msg = NULL;

    if (sqlite3_exec(ex->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        fprintf(stderr, "probectl export: %s: %s\n", msg ? msg : "failed", sql);
        sqlite3_free(msg);
        return -1;
    }
    return 0;
}

/* Binds the JSON cell @v to parameter @i of @st. */
static void bind_cell(sqlite3_stmt *st, int i, json_t *v)
{
    if (json_is_integer(v))
        sqlite3_bind_int64(st, i, json_integer_value(v));
    else if (json_is_real(v))
        sqlite3_bind_double(st, i, json_real_value(v));
    else if (json_is_string(v))
        sqlite3_bind_text(st, i, json_string_value(v), -1, SQLITE_TRANSIENT);
    else if (json_is_true(v) || json_is_false(v))
        sqlite3_bind_int(st, i, json_is_true(v));
    else
        sqlite3_bind_null(st, i);
}

/* Inserts @rows into local table @table (INSERT OR IGNORE: a row read twice, as pages move
 * under rows written meanwhile, is one). */
static int insert_rows(struct export *ex, const char *table, json_t *rows)
{
    size_t ncol = json_array_size(json_array_get(rows, 0)), i;
    sqlite3_stmt *st = NULL;
    char *sql = NULL;
    json_t *row;
    size_t at;
    int r = -1;

    if (ncol == 0)
        return 0;
    sql = malloc(64 + strlen(table) + 2 * ncol);
    if (!sql)
        return -1;
    at = (size_t)sprintf(sql, "INSERT OR IGNORE INTO \"%s\" VALUES (", table);
    for (i = 0; i < ncol; i++)
        at += (size_t)sprintf(sql + at, "%s?", i ? "," : "");
    sprintf(sql + at, ")");
    if (sqlite3_prepare_v2(ex->db, sql, -1, &st, NULL) != SQLITE_OK) {
        fprintf(stderr, "probectl export: %s: %s\n", table, sqlite3_errmsg(ex->db));
        goto out;
    }
    json_array_foreach(rows, i, row)
    {
        for (size_t k = 0; k < ncol; k++)
            bind_cell(st, (int)k + 1, json_array_get(row, k));
        if (sqlite3_step(st) != SQLITE_DONE) {
            fprintf(stderr, "probectl export: %s: %s\n", table, sqlite3_errmsg(ex->db));
            goto out;
        }
        sqlite3_reset(st);
        ex->rows++;
    }
    r = 0;
out:
    sqlite3_finalize(st);
    free(sql);
    return r;
}

/* The WHERE of table @name with columns @cols: the chosen targets, from the chosen time. */
static char *where_of(const struct export *ex, const char *name, json_t *cols)
{
    bool has_target = false, has_ts = false, targets = strcmp(name, "targets") == 0;
    char since[48] = "", *w = NULL;
    json_t *c;
    size_t i;

    json_array_foreach(cols, i, c)
    {
        has_target |= strcmp(json_string_value(c) ?: "", "target_id") == 0;
        has_ts |= strcmp(json_string_value(c) ?: "", "ts_ns") == 0;
    }
    if (has_ts && ex->since_ns)
        snprintf(since, sizeof(since), " AND ts_ns >= %lld", (long long)ex->since_ns);
    if (asprintf(&w, " WHERE (%s)%s",
                 targets      ? ex->pids_cond
                 : has_target ? ex->targets_cond
                              : "1",
                 since) < 0)
        return NULL;
    return w;
}

/* Copies table @name (created already) page by page. */
static int copy_table(struct export *ex, const char *name)
{
    json_t *keep = NULL, *rows;
    char *sql = NULL, *where = NULL;
    long long offset = 0;
    int r = -1;

    if (asprintf(&sql, "SELECT * FROM \"%s\" LIMIT 0", name) < 0)
        return -1;
    if (!remote_rows(ex, sql, &keep))
        goto out;
    where = where_of(ex, name, json_object_get(keep, "columns"));
    json_decref(keep);
    keep = NULL;
    for (;;) {
        free(sql);
        sql = NULL;
        if (!where || asprintf(&sql, "SELECT * FROM \"%s\"%s LIMIT %d OFFSET %lld", name, where,
                               PAGE_ROWS, offset) < 0)
            goto out;
        if (!(rows = remote_rows(ex, sql, &keep)) || insert_rows(ex, name, rows) < 0)
            goto out;
        offset += (long long)json_array_size(rows);
        if (json_array_size(rows) < PAGE_ROWS)
            break;
        json_decref(keep);
        keep = NULL;
    }
    r = 0;
out:
    json_decref(keep);
    free(where);
    free(sql);
    return r;
}

/* The samples (a virtual table over packed blocks in the daemon's store) as plain rows, target
 * by target in time order: each page starts after the last row of the one before. */
static int copy_samples(struct export *ex)
{
    json_t *keep = NULL, *ids, *id, *rows;
    char *sql = NULL;
    size_t i;
    int r = -1;

    if (exec_local(ex, "CREATE TABLE samples (target_id INTEGER NOT NULL, ts_ns INTEGER NOT NULL,"
                       " tid INTEGER NOT NULL, stack_id INTEGER NOT NULL, state INTEGER NOT NULL,"
                       " PRIMARY KEY (target_id, ts_ns, tid)) WITHOUT ROWID") < 0 ||
        asprintf(&sql, "SELECT id FROM targets WHERE %s ORDER BY id", ex->pids_cond) < 0)
        return -1;
    ids = json_incref(remote_rows(ex, sql, &keep));
    json_decref(keep);
    keep = NULL;
    json_array_foreach(ids, i, id)
    {
        long long target = json_integer_value(json_array_get(id, 0));
        long long last_ts = ex->since_ns, last_tid = -1;

        for (;;) {
            free(sql);
            if (asprintf(&sql,
                         "SELECT target_id, ts_ns, tid, stack_id, state FROM samples"
                         " WHERE target_id = %lld AND ts_ns >= %lld AND (ts_ns > %lld OR"
                         " tid > %lld) ORDER BY ts_ns, tid LIMIT %d",
                         target, last_ts, last_ts, last_tid, PAGE_ROWS) < 0) {
                sql = NULL;
                goto out;
            }
            if (!(rows = remote_rows(ex, sql, &keep)) || insert_rows(ex, "samples", rows) < 0)
                goto out;
            if (json_array_size(rows) < PAGE_ROWS)
                break;
            last_ts = json_integer_value(json_array_get(json_array_get(rows, PAGE_ROWS - 1), 1));
            last_tid = json_integer_value(json_array_get(json_array_get(rows, PAGE_ROWS - 1), 2));
            json_decref(keep);
            keep = NULL;
        }
        json_decref(keep);
        keep = NULL;
    }
    r = 0;
out:
    json_decref(keep);
    json_decref(ids);
    free(sql);
    return r;
}

/* The documented views as real views (the daemon's are TEMP, made on each query connection):
 * those that work here; minute_counts, a virtual table there, a view of stack_counts here. */
static int copy_views(struct export *ex, json_t *tables, size_t *made, size_t *left)
{
    json_t *keep = NULL, *rows, *row;
    size_t i;

    if (exec_local(ex, "CREATE VIEW minute_counts AS SELECT target_id, bucket * 60000000000 AS"
                       " ts_ns, tid, stack_id, state, n FROM stack_counts WHERE span_s = 60") < 0)
        return -1;
    rows = remote_rows(ex,
                       "SELECT name, sql FROM sqlite_temp_master WHERE type = 'view'"
                       " ORDER BY rowid",
                       &keep);
    if (!rows)
        return -1;
    json_array_foreach(rows, i, row)
    {
        const char *name = json_string_value(json_array_get(row, 0));
        const char *sql = json_string_value(json_array_get(row, 1));
        char *check = NULL;

        /* the daemon's filtered stand-ins for a user's tables: tables here (or left out) */
        if (!name || !sql || json_object_get(tables, name) || strcmp(name, "samples") == 0 ||
            strcmp(name, "minute_counts") == 0)
            continue;
        if (sqlite3_exec(ex->db, sql, NULL, NULL, NULL) != SQLITE_OK ||
            asprintf(&check, "SELECT * FROM \"%s\" LIMIT 0", name) < 0 ||
            sqlite3_exec(ex->db, check, NULL, NULL, NULL) != SQLITE_OK) {
            /* one reading the daemon's own functions (settings): not here */
            char *drop = NULL;

            if (asprintf(&drop, "DROP VIEW IF EXISTS \"%s\"", name) >= 0)
                sqlite3_exec(ex->db, drop, NULL, NULL, NULL);
            free(drop);
            fprintf(stderr, "probectl export: view %s left out: it needs the daemon\n", name);
            (*left)++;
        } else {
            (*made)++;
        }
        free(check);
    }
    json_decref(keep);
    return 0;
}

/* Whether the one-column rows @rows hold @name. */
static bool listed(json_t *rows, const char *name)
{
    json_t *row;
    size_t i;

    json_array_foreach(rows, i, row)
    {
        if (strcmp(json_string_value(json_array_get(row, 0)) ?: "", name) == 0)
            return true;
    }
    return false;
}

/* The tables (their DDL from the daemon's schema), the samples, the indexes, the views. */
static int copy_all(struct export *ex, size_t *n_tables, size_t *n_skipped, size_t *n_views,
                    size_t *n_left)
{
    json_t *keep = NULL, *keep_shadows = NULL, *rows, *row, *tables = json_object(), *shadows;
    size_t i;
    int r = -1;

    /* a scoped user's tables are views of their rows: their names, none for root */
    shadows = remote_rows(ex,
                          "SELECT name FROM sqlite_temp_master WHERE type = 'view' AND name IN"
                          " ('targets', 'threads', 'samples', 'strings')",
                          &keep_shadows);
    if (!shadows)
        goto out;
    if (json_array_size(shadows)) {
        json_decref(keep_shadows);
        shadows = remote_rows(ex,
                              "SELECT t.name FROM sqlite_temp_master t JOIN sqlite_master m"
                              " ON m.name = t.name WHERE t.type = 'view'",
                              &keep_shadows);
        if (!shadows)
            goto out;
    }
    rows = remote_rows(ex,
                       "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL AND"
                       " type IN ('table', 'index') AND name NOT LIKE 'sqlite_%' ORDER BY"
                       " type = 'index', rowid",
                       &keep);
    if (!rows || exec_local(ex, "BEGIN") < 0)
        goto out;
    json_array_foreach(rows, i, row)
    {
        const char *type = json_string_value(json_array_get(row, 0));
        const char *name = json_string_value(json_array_get(row, 1));
        const char *sql = json_string_value(json_array_get(row, 2));

        if (!type || !name || !sql || strcmp(name, "sample_blocks") == 0 ||
            strncmp(sql, "CREATE INDEX", 12) == 0 || strncmp(sql, "CREATE UNIQUE", 13) == 0)
            continue; /* the packed samples: rows here; indexes after the rows */
        json_object_set_new(tables, name, json_true());
        /* root reads every table; another user those the daemon shows as views of their
         * own rows (the temp view of the same name): root's own are not in their copy */
        if (shadows && json_array_size(shadows) && !listed(shadows, name)) {
            (*n_skipped)++;
            continue;
        }
        if (exec_local(ex, sql) < 0 || copy_table(ex, name) < 0)
            goto out;
        (*n_tables)++;
    }
    if (copy_samples(ex) < 0)
        goto out;
    (*n_tables)++;
    json_array_foreach(rows, i, row)
    {
        const char *sql = json_string_value(json_array_get(row, 2));
        const char *name = json_string_value(json_array_get(row, 1));

        if (strcmp(json_string_value(json_array_get(row, 0)), "index") == 0 && sql && name &&
            strstr(sql, "sample_blocks") == NULL &&
            sqlite3_exec(ex->db, sql, NULL, NULL, NULL) != SQLITE_OK &&
            sqlite3_errcode(ex->db) != SQLITE_ERROR) /* SQLITE_ERROR: its table left out */
            goto out;
    }
    if (copy_views(ex, tables, n_views, n_left) < 0 || exec_local(ex, "COMMIT") < 0)
        goto out;
    r = 0;
out:
    json_decref(tables);
    json_decref(keep);
    json_decref(keep_shadows);
    return r;
}

int export_main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"db", required_argument, NULL, 'd'},    {"pid", required_argument, NULL, 'p'},
        {"since", required_argument, NULL, 's'}, {"socket", required_argument, NULL, 'S'},
        {"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0}};
    struct export ex = {0};
    const char *path = NULL, *since = NULL;
    char pids[1024] = "";
    size_t n_tables = 0, n_skipped = 0, n_views = 0, n_left = 0;
    int c, fd, r;

    while ((c = getopt_long(argc, argv, "d:p:s:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'd':
            path = optarg;
            break;
        case 'p': {
            int pid = client_parse_pid(optarg, "export");

            if (pid < 0)
                return 2;
            if (strlen(pids) + 16 >= sizeof(pids)) {
                fprintf(stderr, "probectl export: too many --pid\n");
                return 2;
            }
            snprintf(pids + strlen(pids), sizeof(pids) - strlen(pids), "%s%d", *pids ? ", " : "",
                     pid);
            break;
        }
        case 's':
            since = optarg;
            break;
        case 'S':
            ex.socket = optarg;
            break;
        case 'h':
            printf("usage: probectl export --db FILE [--pid P]... [--since T]\n"
                   "  A self-contained SQLite copy of what you may read of the daemon's\n"
                   "  database, for sqlite3, DuckDB or pandas: every table, the samples as\n"
                   "  rows (samples), and the documented views as real views (stacks,\n"
                   "  function_stats, thread_states, memory_usage, torch_trace ...), without\n"
                   "  the daemon's functions (ago(): compare ts_ns with a number instead).\n"
                   "  --pid P    only these processes' rows (repeat it for more)\n"
                   "  --since T  only rows from T on: how long ago (1h) or when (14:05)\n"
                   "  FILE must not exist.\n");
            return 0;
        default:
            return 2;
        }
    }
    if (!path || optind != argc) {
        fprintf(stderr, "probectl export: expected --db FILE (and no other argument)\n");
        return 2;
    }
    if (since && client_parse_time(since, "export", "--since", &ex.since_ns) < 0)
        return 2;
    /* a new file of ours: never one that exists, nor through a link */
    if ((fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644)) < 0) {
        fprintf(stderr, "probectl export: %s: %s%s\n", path, strerror(errno),
                errno == EEXIST ? " (give a new file)" : "");
        return 1;
    }
    close(fd);
    if (sqlite3_open_v2(path, &ex.db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK ||
        asprintf(&ex.pids_cond, *pids ? "pid IN (%s)" : "1", pids) < 0 ||
        asprintf(&ex.targets_cond,
                 *pids ? "target_id IN (SELECT id FROM targets WHERE pid IN (%s))" : "1",
                 pids) < 0) {
        fprintf(stderr, "probectl export: %s: %s\n", path,
                ex.db ? sqlite3_errmsg(ex.db) : "out of memory");
        sqlite3_close(ex.db);
        unlink(path);
        return 1;
    }
    exec_local(&ex, "PRAGMA journal_mode = OFF");
    exec_local(&ex, "PRAGMA synchronous = OFF");
    r = copy_all(&ex, &n_tables, &n_skipped, &n_views, &n_left);
    if (r == 0)
        exec_local(&ex, "PRAGMA journal_mode = DELETE");
    sqlite3_close(ex.db);
    free(ex.pids_cond);
    free(ex.targets_cond);
    if (r < 0) {
        unlink(path); /* half a copy is no copy */
        return 1;
    }
    fprintf(stderr, "wrote %s: %zu tables (%lld rows), %zu views%s%s\n", path, n_tables, ex.rows,
            n_views, n_left ? " (some left out: they need the daemon)" : "",
            n_skipped ? "; root's own tables left out" : "");
    return 0;
}
