/*
 * fuzz_sql.c - libFuzzer on read-only SQL: the daemon's own query_run() (the authorizer, the
 * limits, the views a user sees through, the live and view tables) over a real database made
 * by store.c, holding the rows of two users' targets.
 *
 * Input: byte 0 picks who asks (root, uid 1000, uid 1000 about one pid); the rest, up to a
 * NUL, is the SQL. After each query the harness aborts (a crash for libFuzzer) when:
 *   - the database changed (PRAGMA data_version on a connection of its own moved): a write
 *     got through;
 *   - uid 1000 was shown anything of uid 2000's target (its marker string in the reply).
 */
#define _GNU_SOURCE
#include <jansson.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox.h"
#include "query.h"
#include "sampler.h"
#include "sqlmem.h"
#include "store.h"

#define SECRET "secret_of_uid_2000"

static char db_path[256];
static struct sampler *sampler;
static sqlite3 *watch;
static int64_t version;

static int64_t data_version(void)
{
    sqlite3_stmt *q;
    int64_t v = -1;

    if (sqlite3_prepare_v2(watch, "PRAGMA data_version", -1, &q, NULL) == SQLITE_OK &&
        sqlite3_step(q) == SQLITE_ROW)
        v = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    return v;
}

/* Two users' targets, their samples and their strings, as the writer would store them. */
static const char rows[] =
    "INSERT INTO targets (id, pid, start_time, uid, cmdline, py_version, rate_hz, attached_ns)"
    " VALUES (1, 100, 1, 1000, 'python3 mine.py', '3.11.2', 100, 1),"
    " (2, 200, 2, 2000, 'python3 " SECRET ".py', '3.11.2', 100, 1);"
    "INSERT INTO strings (id, text) VALUES (11, 'my_function'), (12, '/home/me/mine.py'),"
    " (21, '" SECRET "'), (22, '/home/other/" SECRET ".py');"
    "INSERT INTO frames (id, func_id, file_id, line, first_line) VALUES (101, 11, 12, 3, 1),"
    " (201, 21, 22, 7, 5);"
    "INSERT INTO stack_frames (stack_id, depth, frame_id) VALUES (1001, 0, 101), (2001, 0, 201);"
    "INSERT INTO threads (target_id, tid, name) VALUES (1, 100, 'MainThread'),"
    " (2, 200, '" SECRET "');"
    "INSERT INTO samples (target_id, ts_ns, tid, stack_id, state) VALUES (1, 1, 100, 1001, 3),"
    " (1, 2, 100, 1001, 1), (2, 1, 200, 2001, 3);"
    "INSERT INTO evals (ts_ns, uid, pid, start_time, target_uid, mode, code, status,"
    " output_bytes, elapsed_ms, injected) VALUES (1, 2000, 200, 2, 2000, 'eval', '" SECRET
    "', 'ok', 0, 1, 1);";

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    char dir[] = "/tmp/probed-fuzz-sql-XXXXXX";
    struct store *st = NULL;
    struct store_err err;
    struct outbox *ob = NULL;
    sqlite3 *db = NULL;

    (void)argc, (void)argv;
    if (sqlmem_install(QUERY_ALL_MEMORY_BYTES) < 0 || !mkdtemp(dir))
        abort();
    snprintf(db_path, sizeof(db_path), "%s/probed.db", dir);
    if (store_open(db_path, &st, &err) < 0) {
        fprintf(stderr, "fuzz_sql: %s\n", err.msg);
        abort();
    }
    store_free(st);
    if (sqlite3_open(db_path, &db) != SQLITE_OK ||
        sqlite3_exec(db, rows, NULL, NULL, NULL) != SQLITE_OK) {
        fprintf(stderr, "fuzz_sql: %s\n", sqlite3_errmsg(db));
        abort();
    }
    sqlite3_close(db);
    if (outbox_new(1024, &ob) < 0 || sampler_new(ob, &sampler) < 0 ||
        sqlite3_open_v2(db_path, &watch, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
        abort();
    version = data_version();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const struct query_limits lim = {.time_ms = 200, .max_rows = 100};
    struct query_scope scope = {.root = true};
    struct query_err err;
    json_t *out = NULL;
    char *sql;

    if (size < 2)
        return 0;
    if (data[0] % 3 == 1)
        scope = (struct query_scope){.uid = 1000};
    else if (data[0] % 3 == 2)
        scope = (struct query_scope){.uid = 1000, .pid = 100};
    sql = strndup((const char *)data + 1, size - 1);
    if (!sql)
        return 0;
    if (query_run(db_path, sampler, &scope, &lim, sql, &out, &err) == 0) {
        char *text = json_dumps(out, 0);
        if (!scope.root && text && strstr(text, SECRET)) {
            fprintf(stderr, "fuzz_sql: uid 1000 saw uid 2000's rows with: %s\n%s\n", sql, text);
            abort();
        }
        free(text);
        json_decref(out);
    }
    if (data_version() != version) {
        fprintf(stderr, "fuzz_sql: the database changed after: %s\n", sql);
        abort();
    }
    free(sql);
    return 0;
}
