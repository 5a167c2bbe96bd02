/* query.c - see query.h. */
#define _GNU_SOURCE
#include "query/query.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "query/livetab.h"
#include "query/dialect.h"
#include "query/samplestab.h"
#include "query/sqlmem.h"
#include "query/sqlprintf.h"
#include "query/viewtab.h"
#include "store/schema.h"
#include "common/units.h"

/* What the authorizer and progress handler need while a query runs. */
/* A statement that timed out after unpacking more samples than this is told of the views that
 * count them instead (a minute of 17 threads at 100 Hz; of 80, 480,000). */
#define QUERY_MANY_SAMPLES 100000

struct guard {
    const struct query_scope *scope;
    bool armed;                   /* false while query.c itself sets the connection up */
    struct samplestab_state tabs; /* samples, minute_counts (samplestab.c): their reads */
    char refused[256];            /* why the authorizer said no */
    uint32_t via_view;      /* raw tables read through a view in the statement being prepared */
    char main_tables[2048]; /* main's tables, each followed by a NUL (the last by two) */
    int64_t deadline_ns;    /* CLOCK_MONOTONIC */
    bool timed_out;
    struct sqlmem_budget *memory; /* what the connection's allocations are charged to */
    struct dialect_swaps swaps;   /* what the rewrite of the seeds' dialect replaced */
};

static int64_t now_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* PRAGMAs that only read, and whose argument (if any) names a table or index. */
static bool pragma_reads(const char *name, const char *arg)
{
    static const char *const introspect[] = {"table_info",      "table_xinfo", "table_list",
                                             "index_list",      "index_info",  "index_xinfo",
                                             "foreign_key_list"};
    static const char *const plain[] = {
        "database_list",   "function_list", "module_list",    "pragma_list",     "collation_list",
        "compile_options", "user_version",  "schema_version", "page_count",      "page_size",
        "freelist_count",  "encoding",      "journal_mode",   "integrity_check", "quick_check"};

    for (size_t i = 0; i < sizeof(introspect) / sizeof(introspect[0]); i++)
        if (strcasecmp(name, introspect[i]) == 0)
            return true;
    for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++)
        if (strcasecmp(name, plain[i]) == 0)
            return arg == NULL || strcasecmp(name, "integrity_check") == 0 ||
                   strcasecmp(name, "quick_check") == 0;
    return false;
}

/*
 * What a caller who is not root (or root asking about one pid) may read in the main database:
 * deny by default. A table is read only through the view of the same name that shadow_tables()
 * makes of the caller's rows (its index here is bit i of guard.via_view); anything else in
 * main (sample_blocks, catching, torch_tracing, allocation_tracking, sqlite_sequence, dbstat,
 * sqlite_stmt, a table a later schema adds) is refused until it is listed with its view.
 */
static int shadowed_table(const char *name)
{
    static const char *const shadowed[] = {
        "targets",
        "threads",
        "samples",
        "stack_counts",
        "minute_counts",
        "strings",
        "frames",
        "stack_frames",
        "stack_tasks",
        "evals",
        "memory",
        "thread_cpu",
        "allocations",
        "torch_records",
        "torch_values",
        "torch_steps",
        "comm_calls",
        "crashes",
        "torch_profiles",
        "torch_profile_events",
        "torch_profile_steps",
        "gpu_memory",
        "gpus",
        "gpu_readings",
        "gpu_process_readings",
        "gpu_xids",
        "ddp_steps",
    };
    _Static_assert(sizeof(shadowed) / sizeof(shadowed[0]) <= 32, "guard.via_view has 32 bits");
    for (size_t i = 0; i < sizeof(shadowed) / sizeof(shadowed[0]); i++)
        if (name && strcasecmp(name, shadowed[i]) == 0)
            return (int)i;
    return -1;
}

/* Read by anyone: the schema, and table-valued functions that read only their arguments. */
static bool public_table(const char *name)
{
    return name &&
           (strcasecmp(name, "sqlite_master") == 0 || strcasecmp(name, "sqlite_schema") == 0 ||
            strcasecmp(name, "json_each") == 0 || strcasecmp(name, "json_tree") == 0);
}

/* Whether @name is one of main's tables (read at the connection's set-up). */
static bool main_table(const struct guard *g, const char *name)
{
    for (const char *t = g->main_tables; name && *t; t += strlen(t) + 1)
        if (strcasecmp(t, name) == 0)
            return true;
    return false;
}

/* main's tables into g->main_tables, before the authorizer is armed. */
static void load_main_tables(sqlite3 *db, struct guard *g)
{
    sqlite3_stmt *q = NULL;
    size_t len = 0;

    /* and the eponymous virtual tables of main, which sqlite_master does not list */
    static const char eponymous[] = "dbstat\0sqlite_stmt\0";

    memset(g->main_tables, 0, sizeof(g->main_tables));
    memcpy(g->main_tables, eponymous, sizeof(eponymous) - 1);
    len = sizeof(eponymous) - 1;
    if (sqlite3_prepare_v2(db, "SELECT name FROM main.sqlite_master WHERE type = 'table'", -1, &q,
                           NULL) != SQLITE_OK)
        return;
    while (sqlite3_step(q) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(q, 0);
        size_t n = name ? strlen(name) : 0;
        if (n && len + n + 2 <= sizeof(g->main_tables)) {
            memcpy(g->main_tables + len, name, n);
            len += n + 1;
        }
    }
    sqlite3_finalize(q);
}

static int authorize(void *ctx, int action, const char *a1, const char *a2, const char *db,
                     const char *accessor)
{
    struct guard *g = ctx;

    if (!g->armed || g->tabs.internal)
        return SQLITE_OK;
    switch (action) {
    case SQLITE_FUNCTION:
        /* fts3_tokenizer() returns an address inside the daemon (and registers a tokenizer
         * from one); load_extension() would load code */
        if (a2 &&
            (strcasecmp(a2, "fts3_tokenizer") == 0 || strcasecmp(a2, "load_extension") == 0)) {
            snprintf(g->refused, sizeof(g->refused), "the function %s() is refused", a2);
            return SQLITE_DENY;
        }
        return SQLITE_OK;
    case SQLITE_SELECT:
    case SQLITE_RECURSIVE:
        return SQLITE_OK;
    case SQLITE_READ: {
        /* A scoped user reads main's tables only through the views of their own rows, each
         * table through its own view. SQLite also asks, outside any view, for a table none of
         * whose columns is read (count(*) of a view): that is the view's read when the view
         * read that table already. */
        int shadow = shadowed_table(a1);
        /* A table none of whose columns is read (count(*)) comes as it was written: without
         * its database when unqualified, and a CTE's name too. Unqualified, a name shadowed by
         * our view is not main's (the view's own reads came through it, as main's); another
         * table of main's name is main's. */
        bool in_main = db ? strcmp(db, "main") == 0 : shadow < 0 && main_table(g, a1);
        if (!in_main || (g->scope->root && !g->scope->pid) || public_table(a1))
            return SQLITE_OK;
        if (shadow >= 0 && accessor && strcasecmp(accessor, a1) == 0) {
            g->via_view |= 1u << shadow;
            return SQLITE_OK;
        }
        if (shadow >= 0 && !accessor && a2 && !a2[0] && (g->via_view & (1u << shadow)))
            return SQLITE_OK;
        snprintf(g->refused, sizeof(g->refused),
                 "reading main.%s is reserved to root; query the views of your own rows"
                 " (targets, threads, samples, stacks, sample_frames, ...)",
                 a1);
        return SQLITE_DENY;
    }
    case SQLITE_PRAGMA:
        if (pragma_reads(a1, a2))
            return SQLITE_OK;
        snprintf(g->refused, sizeof(g->refused),
                 "PRAGMA %s%s%s is refused: queries are read-only (only PRAGMAs that read"
                 " are allowed)",
                 a1, a2 ? " = " : "", a2 ? a2 : "");
        return SQLITE_DENY;
    case SQLITE_ATTACH:
    case SQLITE_DETACH:
        snprintf(g->refused, sizeof(g->refused),
                 "ATTACH and DETACH are refused: queries see"
                 " only probed's database");
        return SQLITE_DENY;
    default:
        snprintf(g->refused, sizeof(g->refused),
                 "refused: queries are read-only (no INSERT, UPDATE, DELETE, CREATE, DROP,"
                 " ALTER or transactions)");
        return SQLITE_DENY;
    }
}

static int progress(void *ctx)
{
    struct guard *g = ctx;

    if (now_mono_ns() < g->deadline_ns)
        return 0;
    g->timed_out = true;
    return 1;
}

/* ---- time helpers: now_ns(), ago('5m'), iso(ts_ns) ---- */

static int64_t now_real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void fn_now_ns(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc, (void)argv;
    sqlite3_result_int64(ctx, now_real_ns());
}

static void fn_ago(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    int64_t d = units_duration_ns((const char *)sqlite3_value_text(argv[0]));

    (void)argc;
    if (d < 0) {
        sqlite3_result_error(ctx, "ago(): expected a duration like '30s', '5m', '2h', '1d'", -1);
        return;
    }
    sqlite3_result_int64(ctx, now_real_ns() - d);
}

static void fn_iso(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    int64_t ns = sqlite3_value_int64(argv[0]);
    time_t secs = (time_t)(ns / 1000000000LL);
    char buf[64];
    struct tm tm;

    (void)argc;
    gmtime_r(&secs, &tm);
    snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
             (int)(ns % 1000000000LL / 1000000));
    sqlite3_result_text(ctx, buf, -1, SQLITE_TRANSIENT);
}

/* ---- connection set-up ---- */

#define TRAINING_LOGS_COLUMNS 64

/*
 * The seeds' training_logs: a row per recorded step and process, a column per variable the
 * torch trace reads (--exprs loss@train,epoch@train: loss, epoch), so that `SELECT epoch,
 * avg(loss) FROM training_logs GROUP BY epoch` runs. Its columns are the variables recorded
 * when the query came, of the user's own processes (torch_values is their view): a name read
 * in two functions is a column per function (loss@train, loss@eval).
 */
static int training_logs_view(sqlite3 *db, struct errbuf *err)
{
    sqlite3_str *sql = sqlite3_str_new(db);
    sqlite3_stmt *q = NULL;
    int rc = sqlite3_prepare_v2(db,
                                "SELECT function, name, count(*) OVER (PARTITION BY name)"
                                " FROM (SELECT DISTINCT function, name FROM torch_values)"
                                " ORDER BY name, function",
                                -1, &q, NULL);
    char *text;
    int n = 0;

    sqlite3_str_appendall(sql, "CREATE TEMP VIEW training_logs AS SELECT step, pid, rank,"
                               " min(ts) AS timestamp");
    while (rc == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW && n++ < TRAINING_LOGS_COLUMNS) {
        const char *function = (const char *)sqlite3_column_text(q, 0);
        const char *name = (const char *)sqlite3_column_text(q, 1);
        if (sqlite3_column_int(q, 2) > 1)
            sqlite3_str_appendf(sql,
                                ", max(CASE WHEN name = %Q AND func = %Q THEN value END)"
                                " AS \"%w@%w\"",
                                name, function, name, function);
        else
            sqlite3_str_appendf(sql, ", max(CASE WHEN name = %Q THEN value END) AS \"%w\"", name,
                                name);
    }
    sqlite3_finalize(q);
    sqlite3_str_appendall(sql, ", min(ts_ns) AS ts_ns, target_id FROM torch_variables"
                               " GROUP BY target_id, step");
    text = sqlite3_str_finish(sql);
    if (rc == SQLITE_OK && text)
        rc = sqlite3_exec(db, text, NULL, NULL, NULL);
    sqlite3_free(text);
    if (rc != SQLITE_OK || !text)
        return errbuf_set(err, -EIO, "training_logs: %s", text ? sqlite3_errmsg(db) : "no memory");
    return 0;
}

/* information_schema.df_settings, as the seeds query it (SELECT name, value ...): the
 * daemon's settings when the query came, in a database of the connection's own. */
static int load_settings(sqlite3 *db, json_t *settings, struct errbuf *err)
{
    sqlite3_stmt *q = NULL;
    size_t i;
    json_t *s;
    int rc = sqlite3_exec(db,
                          "ATTACH 'file:probed_information_schema?mode=memory' AS "
                          "information_schema;"
                          "CREATE TABLE information_schema.df_settings(name TEXT, value TEXT,"
                          " description TEXT, default_value TEXT, live INTEGER)",
                          NULL, NULL, NULL);

    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(
            db, "INSERT INTO information_schema.df_settings VALUES (?, ?, ?, ?, ?)", -1, &q, NULL);
    json_array_foreach(settings, i, s)
    {
        if (rc != SQLITE_OK)
            break;
        sqlite3_bind_text(q, 1, json_string_value(json_object_get(s, "key")), -1, SQLITE_STATIC);
        sqlite3_bind_text(q, 2, json_string_value(json_object_get(s, "value")), -1, SQLITE_STATIC);
        sqlite3_bind_text(q, 3, json_string_value(json_object_get(s, "doc")), -1, SQLITE_STATIC);
        sqlite3_bind_text(q, 4, json_string_value(json_object_get(s, "default")), -1,
                          SQLITE_STATIC);
        sqlite3_bind_int(q, 5, json_is_true(json_object_get(s, "live")));
        rc = sqlite3_step(q) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
        sqlite3_reset(q);
    }
    sqlite3_finalize(q);
    if (rc != SQLITE_OK)
        return errbuf_set(err, -EIO, "information_schema.df_settings: %s", sqlite3_errmsg(db));
    return 0;
}

static int setup_exec(sqlite3 *db, const char *sql, struct errbuf *err)
{
    char *msg = NULL;

    if (sqlite3_exec(db, sql, NULL, NULL, &msg) == SQLITE_OK)
        return 0;
    errbuf_set(err, -EIO, "setting up the query connection: %s", msg ? msg : sqlite3_errmsg(db));
    sqlite3_free(msg);
    return -EIO;
}

/* For a scoped user: every table it may read shadowed by a temp view of its targets' rows (the
 * raw tables themselves are refused by the authorizer). */
static int shadow_tables(sqlite3 *db, const struct query_scope *sc, struct errbuf *err)
{
    char sql[8192], cond[128], eval_cond[128];

    if (sc->root && !sc->pid)
        return 0;
    if (sc->root)
        snprintf(cond, sizeof(cond), "pid = %d", (int)sc->pid);
    else if (sc->pid)
        snprintf(cond, sizeof(cond), "uid = %u AND pid = %d", (unsigned)sc->uid, (int)sc->pid);
    else
        snprintf(cond, sizeof(cond), "uid = %u", (unsigned)sc->uid);
    /* evals: those run in the user's processes (uid there is who asked) */
    if (sc->root)
        snprintf(eval_cond, sizeof(eval_cond), "pid = %d", (int)sc->pid);
    else if (sc->pid)
        snprintf(eval_cond, sizeof(eval_cond), "target_uid = %u AND pid = %d", (unsigned)sc->uid,
                 (int)sc->pid);
    else
        snprintf(eval_cond, sizeof(eval_cond), "target_uid = %u", (unsigned)sc->uid);
    snprintf(
        sql, sizeof(sql),
        "CREATE TEMP VIEW targets AS SELECT * FROM main.targets WHERE %s;"
        "CREATE TEMP VIEW threads AS SELECT * FROM main.threads"
        " WHERE target_id IN (SELECT id FROM temp.targets);"
        "CREATE TEMP VIEW samples AS SELECT * FROM main.samples"
        " WHERE target_id IN (SELECT id FROM temp.targets);"
        "CREATE TEMP VIEW stack_counts AS SELECT * FROM main.stack_counts"
        " WHERE target_id IN (SELECT id FROM temp.targets);"
        "CREATE TEMP VIEW minute_counts AS SELECT * FROM main.minute_counts"
        " WHERE target_id IN (SELECT id FROM temp.targets);"
        "CREATE TEMP VIEW memory AS SELECT * FROM main.memory"
        " WHERE target_id IN (SELECT id FROM temp.targets);"
        "CREATE TEMP VIEW thread_cpu AS SELECT * FROM main.thread_cpu"
        " WHERE target_id IN (SELECT id FROM temp.targets);"
        "CREATE TEMP VIEW allocations AS SELECT * FROM main.allocations"
        " WHERE target_id IN (SELECT id FROM temp.targets);"
        "CREATE TEMP VIEW torch_records AS SELECT * FROM main.torch_records"
        " WHERE target_id IN (SELECT id FROM temp.targets);"
        "CREATE TEMP VIEW torch_values AS SELECT * FROM main.torch_values"
        " WHERE target_id IN (SELECT id FROM temp.targets);"
        "CREATE TEMP VIEW torch_steps AS SELECT * FROM main.torch_steps"
        " WHERE target_id IN (SELECT id FROM temp.targets);"
        "CREATE TEMP VIEW comm_calls AS SELECT * FROM main.comm_calls"
        " WHERE target_id IN (SELECT id FROM temp.targets);"
        "CREATE TEMP VIEW ddp_steps AS SELECT * FROM main.ddp_steps"
        " WHERE target_id IN (SELECT id FROM temp.targets);"
        "CREATE TEMP VIEW torch_profiles AS SELECT * FROM main.torch_profiles"
        " WHERE target_id IN (SELECT id FROM temp.targets);"
        "CREATE TEMP VIEW torch_profile_events AS SELECT * FROM main.torch_profile_events"
        " WHERE target_id IN (SELECT id FROM temp.targets);"
        "CREATE TEMP VIEW torch_profile_steps AS SELECT * FROM main.torch_profile_steps"
        " WHERE target_id IN (SELECT id FROM temp.targets);"
        "CREATE TEMP VIEW gpu_memory AS SELECT * FROM main.gpu_memory"
        " WHERE target_id IN (SELECT id FROM temp.targets);"
        "CREATE TEMP VIEW gpu_process_readings AS SELECT * FROM main.gpu_process_readings"
        " WHERE target_id IN (SELECT id FROM temp.targets);"
        /* the machine's GPUs, as nvidia-smi shows them to every user; their processes are
         * not in these */
        "CREATE TEMP VIEW gpus AS SELECT * FROM main.gpus;"
        "CREATE TEMP VIEW gpu_readings AS SELECT * FROM main.gpu_readings;"
        "CREATE TEMP VIEW gpu_xids AS SELECT * FROM main.gpu_xids;"
        "CREATE TEMP VIEW crashes AS SELECT * FROM main.crashes"
        " WHERE target_id IN (SELECT id FROM temp.targets);"
        "CREATE TEMP VIEW evals AS SELECT * FROM main.evals WHERE %s;"
        /* the dictionaries are shared by every target: only what the user's own samples
         * name (another user's functions and paths are theirs to see only); the hourly
         * counts name every stack the samples do, in far fewer rows */
        "CREATE TEMP VIEW stack_frames AS SELECT * FROM main.stack_frames"
        " WHERE stack_id IN (SELECT stack_id FROM temp.stack_counts WHERE span_s = 3600);"
        "CREATE TEMP VIEW stack_tasks AS SELECT * FROM main.stack_tasks"
        " WHERE stack_id IN (SELECT stack_id FROM temp.stack_counts WHERE span_s = 3600);"
        "CREATE TEMP VIEW frames AS SELECT * FROM main.frames"
        " WHERE id IN (SELECT frame_id FROM temp.stack_frames);"
        "CREATE TEMP VIEW strings AS SELECT * FROM main.strings"
        " WHERE id IN (SELECT func_id FROM temp.frames UNION SELECT file_id FROM temp.frames);",
        cond, eval_cond);
    return setup_exec(db, sql, err);
}

/* Bounds on what a statement may build (the schema and views are made before, unbounded). */
static void set_limits(sqlite3 *db)
{
    sqlite3_limit(db, SQLITE_LIMIT_LENGTH, QUERY_VALUE_BYTES);
    sqlite3_limit(db, SQLITE_LIMIT_SQL_LENGTH, QUERY_SQL_BYTES);
    sqlite3_limit(db, SQLITE_LIMIT_COLUMN, 500);
    sqlite3_limit(db, SQLITE_LIMIT_EXPR_DEPTH, 500);
    sqlite3_limit(db, SQLITE_LIMIT_COMPOUND_SELECT, 100);
    sqlite3_limit(db, SQLITE_LIMIT_FUNCTION_ARG, 64);
    sqlite3_limit(db, SQLITE_LIMIT_LIKE_PATTERN_LENGTH, 1000);
    sqlite3_limit(db, SQLITE_LIMIT_VARIABLE_NUMBER, 100);
    sqlite3_limit(db, SQLITE_LIMIT_WORKER_THREADS, 0);
}

static int open_connection(const char *path, struct guard *g, sqlite3 **ret, struct errbuf *err)
{
    sqlite3 *db = NULL;
    int r;

    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL) != SQLITE_OK) {
        r = errbuf_set(err, -EIO, "opening %s read-only: %s", path,
                       db ? sqlite3_errmsg(db) : "no memory");
        sqlite3_close(db);
        return r;
    }
    sqlite3_busy_timeout(db, 2000);
    sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
    sqlite3_set_authorizer(db, authorize, g);
    sqlite3_progress_handler(db, 10000, progress, g);
    sqlite3_create_function(db, "now_ns", 0, SQLITE_UTF8, NULL, fn_now_ns, NULL, NULL);
    sqlite3_create_function(db, "ago", 1, SQLITE_UTF8, NULL, fn_ago, NULL, NULL);
    sqlite3_create_function(db, "iso", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL, fn_iso, NULL,
                            NULL);
    r = livetab_register(db, g->scope) == SQLITE_OK &&
                livetab_register_tasks(db, g->scope) == SQLITE_OK
            ? 0
            : errbuf_set(err, -EIO, "python.backtrace, python.tasks");
    if (r == 0 && dialect_register(db) != SQLITE_OK)
        r = errbuf_set(err, -EIO, "registering now(), hour(), ...: %s", sqlite3_errmsg(db));
    if (r == 0 && sqlprintf_register(db, QUERY_VALUE_BYTES) != SQLITE_OK)
        r = errbuf_set(err, -EIO, "registering printf(): %s", sqlite3_errmsg(db));
    if (r == 0 && samplestab_register(db, &g->tabs) != SQLITE_OK)
        r = errbuf_set(err, -EIO, "registering samples: %s", sqlite3_errmsg(db));
    /* connected now, before the authorizer is armed: connecting declares the table, which the
     * authorizer would take for a write of the schema */
    if (r == 0)
        r = setup_exec(db,
                       "SELECT 1 FROM main.samples WHERE 0;"
                       "SELECT 1 FROM main.minute_counts WHERE 0",
                       err);
    if (r == 0)
        r = setup_exec(db,
                       "ATTACH 'file:probed_python?mode=memory' AS python;"
                       "CREATE VIRTUAL TABLE python.backtrace USING probed_backtrace;"
                       "CREATE VIRTUAL TABLE python.tasks USING probed_tasks;",
                       err);
    if (r == 0)
        r = load_settings(db, g->scope->settings, err);
    if (r == 0)
        r = shadow_tables(db, g->scope, err);
    if (r == 0)
        r = setup_exec(db, schema_views, err);
    if (r == 0)
        r = training_logs_view(db, err);
    if (r == 0)
        r = viewtab_register(db) == SQLITE_OK
                ? setup_exec(
                      db,
                      "CREATE VIRTUAL TABLE python.torch_trace USING probed_view(torch_trace);"
                      "CREATE VIRTUAL TABLE python.variables"
                      " USING probed_view(torch_variables);",
                      err)
                : errbuf_set(err, -EIO, "python.torch_trace");
    if (r < 0) {
        sqlite3_close(db);
        return r;
    }
    load_main_tables(db, g);
    set_limits(db);
    g->armed = true;
    *ret = db;
    return 0;
}

/* ---- running ---- */

static json_t *column_value(sqlite3_stmt *q, int i)
{
    switch (sqlite3_column_type(q, i)) {
    case SQLITE_INTEGER:
        return json_integer(sqlite3_column_int64(q, i));
    case SQLITE_FLOAT:
        return json_real(sqlite3_column_double(q, i));
    case SQLITE_NULL:
        return json_null();
    case SQLITE_BLOB:
        return json_sprintf("<blob of %d bytes>", sqlite3_column_bytes(q, i));
    default: {
        const char *text = (const char *)sqlite3_column_text(q, i);
        size_t n = (size_t)sqlite3_column_bytes(q, i);
        json_t *v = json_stringn(text, n);
        char *clean;
        /* not UTF-8 (a row stored before text was cleaned where it enters, or bytes a query
         * made: CAST(x'ff' AS TEXT)): cleaned, never a column dropped and the rest shifted */
        if (v || !text || !(clean = malloc(3 * n + 1)))
            return v ? v : json_null();
        v = json_stringn(clean, pyf_utf8_clean(clean, 3 * n + 1, text, n));
        free(clean);
        return v ? v : json_null();
    }
    }
}

/* Why a statement stopped: a limit it ran into is named, with the limit. */
static int fail_step(sqlite3 *db, struct guard *g, int rc, struct errbuf *err)
{
    if (g->memory && g->memory->refused && g->memory->over_all)
        return errbuf_set(err, -EAGAIN,
                          "the queries running now hold all the memory queries may have (%lld MiB);"
                          " try again",
                          QUERY_ALL_MEMORY_BYTES >> 20);
    if (g->memory && g->memory->refused)
        return errbuf_set(err, -EINVAL,
                          "the query needed more than %lld MiB (the query memory limit)",
                          QUERY_MEMORY_BYTES >> 20);
    if ((rc & 0xff) == SQLITE_TOOBIG)
        return errbuf_set(err, -EINVAL, "%s: a value longer than %d bytes (the query value limit)",
                          sqlite3_errmsg(db), QUERY_VALUE_BYTES);
    return errbuf_set(err, -EINVAL, "%s", g->refused[0] ? g->refused : sqlite3_errmsg(db));
}

/* Whether anything but blanks and semicolons follows the first statement. */
static bool more_after(const char *tail)
{
    while (tail && (*tail == ' ' || *tail == '\n' || *tail == '\t' || *tail == ';'))
        tail++;
    return tail && *tail;
}

static int prepare(sqlite3 *db, struct guard *g, const char *sql, sqlite3_stmt **ret,
                   struct errbuf *err)
{
    const char *tail = NULL;
    sqlite3_stmt *q = NULL;
    char *rewritten = NULL; /* the seeds' dialect made SQLite's: now() - interval '5 min' */
    int rc = dialect_rewrite(sql, &rewritten, &g->swaps);
    bool more;

    if (rc < 0)
        return errbuf_set(err, rc, "out of memory");
    g->via_view = 0;
    rc = sqlite3_prepare_v2(db, rewritten ? rewritten : sql, -1, &q, &tail);
    if (rc != SQLITE_OK && rewritten && strstr(sqlite3_errmsg(db), "now_offset")) {
        /* an error in what the rewrite wrote: told of the user's own text instead */
        free(rewritten);
        rewritten = NULL;
        rc = sqlite3_prepare_v2(db, sql, -1, &q, &tail);
    }
    more = more_after(tail); /* tail points into the text prepared */
    free(rewritten);
    if (rc != SQLITE_OK)
        return fail_step(db, g, rc, err);
    if (!q)
        return errbuf_set(err, -EINVAL, "empty query");
    if (more) {
        sqlite3_finalize(q);
        return errbuf_set(err, -EINVAL, "one statement per query (found more after the first)");
    }
    if (!sqlite3_stmt_readonly(q)) { /* the authorizer should have refused it already */
        sqlite3_finalize(q);
        return errbuf_set(err, -EINVAL, "refused: queries are read-only");
    }
    *ret = q;
    return 0;
}

static int collect(sqlite3 *db, struct guard *g, sqlite3_stmt *q, const struct query_limits *lim,
                   json_t *out, struct errbuf *err)
{
    int ncol = sqlite3_column_count(q), rc;
    json_t *cols = json_array(), *rows = json_array();
    int64_t n = 0, bytes = 0;

    json_object_set_new(out, "columns", cols);
    json_object_set_new(out, "rows", rows);
    for (int i = 0; i < ncol; i++) { /* named in the user's words, not the rewrite's */
        char *written = dialect_column_name(&g->swaps, sqlite3_column_name(q, i));
        json_array_append_new(cols, json_string(written ? written : sqlite3_column_name(q, i)));
        free(written);
    }
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        json_t *row;
        if (n == lim->max_rows || bytes > QUERY_REPLY_BYTES) {
            json_object_set_new(out, "truncated", json_true());
            return 0;
        }
        row = json_array();
        for (int i = 0; i < ncol; i++) {
            json_array_append_new(row, column_value(q, i));
            bytes +=
                8 + (sqlite3_column_type(q, i) == SQLITE_TEXT ? sqlite3_column_bytes(q, i) : 0);
        }
        json_array_append_new(rows, row);
        n++;
    }
    if (rc == SQLITE_DONE) {
        json_object_set_new(out, "truncated", json_false());
        return 0;
    }
    if (g->timed_out && g->tabs.samples_read > QUERY_MANY_SAMPLES)
        return errbuf_set(err, -ETIMEDOUT,
                          "query interrupted after %lld ms (the query time limit), having read"
                          " %llu samples one by one: bound ts_ns (ts_ns > ago('10m')) or pid,"
                          " or ask the views that count them (function_stats, thread_stats,"
                          " stack_minutes: docs/query.md)",
                          (long long)lim->time_ms, (unsigned long long)g->tabs.samples_read);
    if (g->timed_out)
        return errbuf_set(err, -ETIMEDOUT, "query interrupted after %lld ms (the query time limit)",
                          (long long)lim->time_ms);
    return fail_step(db, g, rc, err);
}

int query_run(const char *db_path, const struct query_scope *scope, const struct query_limits *lim,
              const char *sql, json_t **ret, struct errbuf *err)
{
    struct guard g = {.scope = scope};
    sqlite3_stmt *q = NULL;
    sqlite3 *db = NULL;
    json_t *out;
    int r;

    g.memory = sqlmem_enter(QUERY_MEMORY_BYTES);
    if (!g.memory)
        return errbuf_set(err, -EAGAIN, "too many queries hold memory now (%d); try again",
                          SQLMEM_BUDGETS);
    r = open_connection(db_path, &g, &db, err);
    if (r < 0) {
        sqlmem_leave(g.memory);
        return r;
    }
    g.deadline_ns = now_mono_ns() + lim->time_ms * 1000000LL;
    r = prepare(db, &g, sql, &q, err);
    out = r == 0 ? json_object() : NULL;
    if (r == 0)
        r = out ? collect(db, &g, q, lim, out, err) : errbuf_set(err, -EIO, "out of memory");
    sqlite3_finalize(q);
    sqlite3_close(db);
    sqlmem_leave(g.memory);
    dialect_swaps_free(&g.swaps);
    if (r < 0) {
        json_decref(out);
        return r;
    }
    *ret = out;
    return 0;
}
