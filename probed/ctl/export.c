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

#define PAGE_ROWS 100000 /* rows a query of the copy asks for, by default */

/* What is copied: all of the caller's, or the targets of some pids, from a time on. */
struct export
{
    const char *socket;
    sqlite3 *db;
    char *targets_cond; /* an SQL condition on a target_id column ("1": every one) */
    char *pids_cond;    /* the same on targets' pid ("1") */
    int64_t since_ns;   /* 0: from the first row */
    long long rows;     /* copied so far */
    int page_rows;      /* rows a query of the copy asks for */
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

/* The order a table is copied in: its primary key (@unique), else (target_id, ts_ns) or ts_ns,
 * from its local copy's columns; as an SQL list of quoted names, and each one's place in the
 * daemon's SELECT * (@cols). 0 columns: none (the pages then go by OFFSET). */
struct order {
    char list[256];
    int at[8];
    int n;
    bool unique;
};

static void order_of(const struct export *ex, const char *name, json_t *cols, struct order *o)
{
    char *names[8] = {0}, *sql;
    sqlite3_stmt *st = NULL;
    bool target = false, ts = false, ok = true;
    int n = 0, key_cols = 0;
    json_t *c;
    size_t i;

    memset(o, 0, sizeof(*o));
    if ((sql = sqlite3_mprintf("SELECT name, pk FROM pragma_table_info(%Q) ORDER BY pk", name)) &&
        sqlite3_prepare_v2(ex->db, sql, -1, &st, NULL) == SQLITE_OK)
        while (sqlite3_step(st) == SQLITE_ROW) {
            const char *col = (const char *)sqlite3_column_text(st, 0);
            if (!col)
                continue;
            if (sqlite3_column_int(st, 1) > 0 && ++key_cols <= 8)
                names[n++] = strdup(col);
            target |= strcmp(col, "target_id") == 0;
            ts |= strcmp(col, "ts_ns") == 0;
        }
    sqlite3_finalize(st);
    sqlite3_free(sql);
    /* more than 8 key columns: the first 8 order it, as the time orders a table without one */
    o->unique = key_cols > 0 && key_cols <= 8;
    if (n == 0 && ts) { /* no key: the time (the rows of one instant in one page) */
        if (target)
            names[n++] = strdup("target_id");
        names[n++] = strdup("ts_ns");
    }
    for (int k = 0; k < n; k++) {
        size_t len = strlen(o->list);
        char *quoted = names[k] ? sqlite3_mprintf("%s\"%w\"", k ? ", " : "", names[k]) : NULL;

        o->at[k] = -1;
        json_array_foreach(cols, i, c)
        {
            if (names[k] && strcmp(json_string_value(c) ?: "", names[k]) == 0)
                o->at[k] = (int)i;
        }
        /* a column the daemon's rows lack, or no room: no order (OFFSET) */
        ok &= o->at[k] >= 0 && quoted && len + strlen(quoted) < sizeof(o->list);
        if (ok)
            memcpy(o->list + len, quoted, strlen(quoted) + 1);
        sqlite3_free(quoted);
        free(names[k]);
    }
    o->n = ok ? n : 0;
}

/* Row @row's values of the order's columns as an SQL row value, "(1, 'a')"; NULL where one is
 * NULL (no row compares with it) or memory ran out. */
static char *key_of(const struct order *o, json_t *row)
{
    char *out = sqlite3_mprintf("(");

    for (int k = 0; out && k < o->n; k++) {
        json_t *v = json_array_get(row, (size_t)o->at[k]);
        char *next;
        if (json_is_integer(v))
            next =
                sqlite3_mprintf("%s%s%lld", out, k ? ", " : "", (long long)json_integer_value(v));
        else if (json_is_real(v))
            next = sqlite3_mprintf("%s%s%!.17g", out, k ? ", " : "", json_real_value(v));
        else if (json_is_string(v))
            next = sqlite3_mprintf("%s%s%Q", out, k ? ", " : "", json_string_value(v));
        else
            next = NULL;
        sqlite3_free(out);
        out = next;
    }
    if (out) {
        char *closed = sqlite3_mprintf("%s)", out);
        sqlite3_free(out);
        out = closed;
    }
    return out;
}

/* Whether rows @a and @b have the same order values. */
static bool same_key(const struct order *o, json_t *a, json_t *b)
{
    for (int k = 0; k < o->n; k++)
        if (!json_equal(json_array_get(a, (size_t)o->at[k]), json_array_get(b, (size_t)o->at[k])))
            return false;
    return true;
}

/* One page of @name: rows @cond (and @where) in the table's order, @offset on. */
static json_t *page(struct export *ex, const char *name, const char *where, const struct order *o,
                    const char *cond, long long offset, json_t **keep)
{
    char *sql = NULL;
    json_t *rows = NULL;

    if (asprintf(&sql, "SELECT * FROM \"%s\"%s%s%s%s%s LIMIT %d OFFSET %lld", name, where,
                 cond ? " AND " : "", cond ? cond : "", o->n ? " ORDER BY " : "",
                 o->n ? o->list : "", ex->page_rows, offset) >= 0)
        rows = remote_rows(ex, sql, keep);
    free(sql);
    return rows;
}

/* Inserts the first @take of @rows. */
static int insert_first(struct export *ex, const char *name, json_t *rows, size_t take)
{
    json_t *part;
    int r;

    if (take == json_array_size(rows))
        return insert_rows(ex, name, rows);
    part = json_array();
    for (size_t i = 0; i < take; i++)
        json_array_append(part, json_array_get(rows, i));
    r = insert_rows(ex, name, part);
    json_decref(part);
    return r;
}

/* Copies table @name (created already) page by page: each page begins past the last row of the
 * one before in the table's order (its key, or its time), so rows the daemon adds or deletes
 * meanwhile (retention) move no row of the copy out of reach or into it twice, and no page
 * rescans those before it as an OFFSET would. In a table without a key the rows of the page's
 * last instant wait for the next page (one instant filling a page: the rest of it by OFFSET
 * within it); a NULL in the order, or no order, leaves OFFSET for the rest. */
static int copy_table(struct export *ex, const char *name)
{
    json_t *keep = NULL, *rows;
    char *sql = NULL, *where = NULL, *cond = NULL, *key = NULL;
    long long offset = 0;
    bool by_offset;
    struct order o;
    int r = -1;

    if (asprintf(&sql, "SELECT * FROM \"%s\" LIMIT 0", name) < 0)
        return -1;
    if (!remote_rows(ex, sql, &keep) ||
        !(where = where_of(ex, name, json_object_get(keep, "columns"))))
        goto out;
    order_of(ex, name, json_object_get(keep, "columns"), &o);
    by_offset = o.n == 0;
    for (;;) {
        size_t n, take;
        json_t *last;

        json_decref(keep);
        keep = NULL;
        if (!(rows = page(ex, name, where, &o, cond, offset, &keep)))
            goto out;
        n = json_array_size(rows);
        last = json_array_get(rows, n - 1);
        sqlite3_free(key);
        key = n == (size_t)ex->page_rows && !by_offset ? key_of(&o, last) : NULL;
        if (n < (size_t)ex->page_rows || by_offset || !key) { /* the end, or OFFSET on */
            if (insert_rows(ex, name, rows) < 0)
                goto out;
            if (n < (size_t)ex->page_rows)
                break;
            by_offset = true;
            offset += (long long)n;
            continue;
        }
        take = n;
        while (!o.unique && take > 0 && same_key(&o, json_array_get(rows, take - 1), last))
            take--;
        if (insert_first(ex, name, rows, take ? take : n) < 0)
            goto out;
        sqlite3_free(cond);
        cond = NULL;
        if (take == 0) { /* one instant filled the page: the rest of it, then past it */
            long long within = (long long)n;
            if (!(cond = sqlite3_mprintf("(%s) = %s", o.list, key)))
                goto out;
            for (size_t got = n; got == (size_t)ex->page_rows; within += (long long)got) {
                json_decref(keep);
                keep = NULL;
                if (!(rows = page(ex, name, where, &o, cond, within, &keep)) ||
                    insert_rows(ex, name, rows) < 0)
                    goto out;
                got = json_array_size(rows);
            }
            sqlite3_free(cond);
        }
        cond = sqlite3_mprintf("(%s) %s %s", o.list, o.unique || take == 0 ? ">" : ">=", key);
        if (!cond)
            goto out;
    }
    r = 0;
out:
    json_decref(keep);
    sqlite3_free(cond);
    sqlite3_free(key);
    free(where);
    free(sql);
    return r;
}

/* The samples (a virtual table over packed blocks in the daemon's store) as plain rows, target
 * by target in time order: each page starts after the last row of the one before. */
static int copy_samples(struct export *ex)
{
    json_t *keep = NULL, *ids, *id, *rows, *last;
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
                         target, last_ts, last_ts, last_tid, ex->page_rows) < 0) {
                sql = NULL;
                goto out;
            }
            if (!(rows = remote_rows(ex, sql, &keep)) || insert_rows(ex, "samples", rows) < 0)
                goto out;
            if (json_array_size(rows) < (size_t)ex->page_rows)
                break;
            last = json_array_get(rows, json_array_size(rows) - 1);
            last_ts = json_integer_value(json_array_get(last, 1));
            last_tid = json_integer_value(json_array_get(last, 2));
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
    static const struct option longopts[] = {{"db", required_argument, NULL, 'd'},
                                             {"pid", required_argument, NULL, 'p'},
                                             {"since", required_argument, NULL, 's'},
                                             {"socket", required_argument, NULL, 'S'},
                                             {"page-rows", required_argument, NULL, 'P'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    struct export ex = {.page_rows = PAGE_ROWS};
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
        case 'P': {
            char *end;
            long v = strtol(optarg, &end, 10);

            if (*end || v < 1 || v > PAGE_ROWS) {
                fprintf(stderr, "probectl export: --page-rows takes 1 to %d, not '%s'\n", PAGE_ROWS,
                        optarg);
                return 2;
            }
            ex.page_rows = (int)v;
            break;
        }
        case 'h':
            printf("usage: probectl export --db FILE [--pid P]... [--since T] [--page-rows N]\n"
                   "  A self-contained SQLite copy of what you may read of the daemon's\n"
                   "  database, for sqlite3, DuckDB or pandas: every table, the samples as\n"
                   "  rows (samples), and the documented views as real views (stacks,\n"
                   "  function_stats, thread_states, memory_usage, torch_trace ...), without\n"
                   "  the daemon's functions (ago(): compare ts_ns with a number instead).\n"
                   "  --pid P    only these processes' rows (repeat it for more)\n"
                   "  --since T  only rows from T on: how long ago (1h) or when (14:05)\n"
                   "  --page-rows N  rows a request asks the daemon for (default %d): each\n"
                   "             page starts past the last (no row missed or taken twice as\n"
                   "             the daemon writes and deletes meanwhile)\n"
                   "  FILE must not exist.\n",
                   PAGE_ROWS);
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
